"""Regenerate the clients from the service's OpenAPI document (``make clients``).

    clients/openapi.json   the document, exactly as the app serves it at /openapi.json
    clients/python/        openapi-python-client (pinned in pyproject's test extra), with
                           the options in clients/openapi-python-client.yaml and the
                           templates of clients/python-templates/ (its README)
    clients/typescript/    openapi-typescript types (src/schema.d.ts), tools pinned in its
                           package.json + package-lock.json

tests/clients/test_generated.py runs the same functions against a live server's
/openapi.json and fails when anything committed here has drifted from it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

CLIENTS = Path(__file__).resolve().parent
DOCUMENT = CLIENTS / "openapi.json"
PYTHON_CLIENT = CLIENTS / "python"
PYTHON_CONFIG = CLIENTS / "openapi-python-client.yaml"
PYTHON_TEMPLATES = CLIENTS / "python-templates"  # ours over the generator's (its README)
TYPESCRIPT = CLIENTS / "typescript"
TYPESCRIPT_SCHEMA = TYPESCRIPT / "src" / "schema.d.ts"


class GenerationFailed(Exception):
    """A generator exited non-zero or warned (warnings mean an operation went missing)."""


def served_document() -> dict[str, Any]:
    """The document the app serves, built without a store (the engine starts in lifespan)."""
    from app.config import Settings
    from app.main import create_app

    return create_app(Settings(data_dir="/nonexistent")).openapi()


def write_document(document: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def _run(args: list[str], cwd: Path) -> None:
    # The generator's post-hooks run ruff: the one installed beside this interpreter.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    done = subprocess.run(
        args, check=False, cwd=cwd, env={**os.environ, "PATH": path}, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise GenerationFailed(
            f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )


def python_client(document: Path, out: Path) -> None:
    """openapi-python-client into ``out`` (replaced); any warning is a failure."""
    _run(
        [
            sys.executable,
            "-m",
            "openapi_python_client",
            "generate",
            "--path",
            str(document),
            "--output-path",
            str(out),
            "--config",
            str(PYTHON_CONFIG),
            "--custom-template-path",
            str(PYTHON_TEMPLATES),
            "--meta",
            "uv",
            "--overwrite",
            "--fail-on-warning",
        ],
        cwd=out.parent,
    )
    shutil.rmtree(out / ".ruff_cache", ignore_errors=True)


def npm() -> str | None:
    return shutil.which("npm")


def typescript_tools() -> Path:
    """clients/typescript/node_modules/.bin, installed from the lock file if missing."""
    bin_dir = TYPESCRIPT / "node_modules" / ".bin"
    if not (bin_dir / "openapi-typescript").exists() or not (bin_dir / "tsc").exists():
        tool = npm()
        if tool is None:
            raise GenerationFailed("npm is not on PATH: install Node.js (apt-get install npm)")
        _run([tool, "ci", "--no-audit", "--no-fund"], cwd=TYPESCRIPT)
    return bin_dir


def typescript_types(document: Path, out: Path) -> None:
    """openapi-typescript: ``paths`` and ``components`` types for ``document``."""
    # Defaults do not make a member required: request bodies may leave them out.
    tool = str(typescript_tools() / "openapi-typescript")
    _run([tool, str(document), "-o", str(out), "--default-non-nullable", "false"], TYPESCRIPT)


def typescript_check() -> None:
    """``tsc --noEmit`` over clients/typescript/src (the types and the code using them)."""
    _run([str(typescript_tools() / "tsc"), "--noEmit", "-p", str(TYPESCRIPT)], TYPESCRIPT)


def main() -> int:
    write_document(served_document(), DOCUMENT)
    python_client(DOCUMENT, PYTHON_CLIENT)
    print("wrote clients/openapi.json and clients/python/")
    if npm() is None:
        print("npm is not on PATH: TypeScript types not regenerated (apt-get install npm)")
        return 1
    typescript_types(DOCUMENT, TYPESCRIPT_SCHEMA)
    typescript_check()
    print("wrote clients/typescript/src/schema.d.ts (tsc --noEmit clean)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except GenerationFailed as exc:
        sys.exit(f"make clients: {exc}")
