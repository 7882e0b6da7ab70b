"""A real server for the CLI tests (the same fixture as the client tests)."""

from tests.clients.conftest import server

__all__ = ["server"]
