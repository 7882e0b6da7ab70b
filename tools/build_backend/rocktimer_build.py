"""The project's PEP 517 build backend: setuptools' own, minus one informational note.

The project ships two package roots (``.`` and ``clients/python``, where the generated
client lives), so an editable install maps them with an import finder, and setuptools
then emits an ``InformationOnly`` note, "Editable installation.", about folders in the
working directory shadowing packages. It is not a deprecation and asks nothing of the
project, but pip shows every warning of the backend, so each ``pip install -e`` printed
it. Every other setuptools warning still shows: an install that prints one is a real
finding.
"""

from __future__ import annotations

import warnings

from setuptools.build_meta import (
    build_editable,
    build_sdist,
    build_wheel,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)
from setuptools.warnings import InformationOnly

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

warnings.filterwarnings("ignore", message=r"Editable installation\.", category=InformationOnly)
