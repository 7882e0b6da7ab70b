"""The one table every run prints (Markdown, so it pastes into bench/README.md as is)."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from tests.support.process import ROOT

HEADER = ("#", "figure", "result", "ceiling (same run)", "ratio", "target", "met", "notes")


@dataclass(frozen=True, slots=True)
class Row:
    number: str
    figure: str
    result: str
    ceiling: str
    ratio: str
    target: str
    met: bool | None  # None: nothing to meet (informational row)
    notes: str = ""

    def cells(self) -> tuple[str, ...]:
        met = "-" if self.met is None else ("yes" if self.met else "**no**")
        return (
            self.number,
            self.figure,
            self.result,
            self.ceiling,
            self.ratio,
            self.target,
            met,
            self.notes,
        )


def ratio(measured: float, ceiling: float) -> str:
    """``measured / ceiling`` to two places ("n/a" without a ceiling)."""
    return f"{measured / ceiling:.2f}" if ceiling > 0 else "n/a"


def machine() -> str:
    """CPU model, cores and RAM of this machine, for the table's caption."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo", encoding="ascii") as f:
            mem_kib = int(f.readline().split()[1])
    except OSError:
        mem_kib = 0
    python = platform.python_version()
    return f"{model}, {os.cpu_count()} cores, {mem_kib / 2**20:.0f} GiB RAM, Python {python}"


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
    ).stdout.strip()


def revision() -> str:
    """The commit measured (``+dirty`` with uncommitted changes), or "unknown"."""
    try:
        head = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def load_average() -> str:
    """The 1/5/15-minute load averages: how busy the machine was besides the bench."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def table(rows: Sequence[Row], scale: str, note: str = "") -> str:
    today = datetime.date.today().isoformat()
    caption = f"rocktimer bench, {scale} profile, {today}, commit {revision()} — {machine()}"
    lines = [
        caption + (f"; {note}" if note else ""),
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join("---" for _ in HEADER) + "|",
    ]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines)
