"""The images' lock files against pyproject.toml: drift fails here, without network."""

from __future__ import annotations

import copy

from deploy import lock



def test_every_lock_is_in_sync_with_pyproject() -> None:
    assert lock.check() == []


def test_a_dependency_added_without_make_lock_is_drift() -> None:
    pyproject = lock.read_pyproject()
    runtime = lock.LOCKS[0]
    text = runtime.path.read_text()
    assert lock.problems(runtime, pyproject, text) == []

    changed = copy.deepcopy(pyproject)
    changed["project"]["dependencies"].append("tomli-w>=1.0")
    assert lock.problems(runtime, changed, text) == [
        "deploy/requirements.lock is out of date with pyproject.toml: run `make lock`",
        "deploy/requirements.lock does not pin tomli-w (tomli-w>=1.0): run `make lock`",
    ]


def test_a_pin_outside_pyprojects_range_is_reported() -> None:
    pyproject = lock.read_pyproject()
    runtime = lock.LOCKS[0]
    text = runtime.path.read_text()
    pinned = lock.pins(text)["fastapi"]
    edited = text.replace(f"fastapi=={pinned[0]} ", "fastapi==0.1.0 ")
    assert lock.problems(runtime, pyproject, edited) == [
        f"deploy/requirements.lock pins fastapi==0.1.0, outside "
        f"{next(r for r in lock.inputs(pyproject, ()) if r.name == 'fastapi')}: run `make lock`"
    ]


def test_the_pipeline_lock_pins_the_pipeline_extra_on_top_of_the_runtime() -> None:
    runtime, pipeline = (lock.pins(lk.path.read_text()) for lk in lock.LOCKS)
    assert {"pyspark", "matplotlib"} <= pipeline.keys()
    assert "pyspark" not in runtime
    assert {"fastapi", "rocksdict", "setuptools"} <= runtime.keys() & pipeline.keys()


def test_a_missing_lock_says_how_to_make_it() -> None:
    assert lock.problems(lock.LOCKS[0], lock.read_pyproject(), None) == [
        "deploy/requirements.lock is missing: run `make lock`"
    ]
