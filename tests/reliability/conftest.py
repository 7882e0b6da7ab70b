"""The reliability tests use the end-to-end fixtures (real server processes)."""

from tests.e2e.conftest import fresh_server

__all__ = ["fresh_server"]
