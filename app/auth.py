"""API keys (``ROCKTIMER_API_KEYS``): a gate of the front door (app/front.py), set only when
keys are configured, that gives each path the role api.md's table asks for.

| role | may call |
| producer | send, batch send, message status, cancel, reschedule, list scheduled messages, |
|          | schedules |
| consumer | receive, ack, nack, invisibility, per-group message state, GET group settings, |
|          | list topics, list a topic's groups, GET schedules |
| admin | everything, including PUT group settings, DLQ list and redrive |
| (none) | /healthz, /readyz, /metrics, /openapi.json, /docs |
"""

from __future__ import annotations

import hmac

from starlette.types import Scope

from app.config import Role
from app.errors import Forbidden, Unauthorized

# Calls any valid key may make: the console asks who it is and reads the overview.
ANY_ROLE_PATHS = frozenset({"/v1/me", "/v1/stats"})


def required_role(method: str, path: str) -> Role | tuple[Role, ...] | None:
    """The role a request needs (any one of a tuple), or None for the open endpoints (and
    the console's static files: the console asks for a key before it calls the API)."""
    parts = path.split("/")  # "", "v1", "topics", topic, kind, ...
    if parts[1:] == ["v1", "topics"]:  # the topic list
        return Role.CONSUMER
    if len(parts) < 5 or parts[1] != "v1" or parts[2] != "topics":
        return None if not path.startswith("/v1/") else Role.ADMIN
    if parts[4] == "messages":
        return Role.PRODUCER
    if parts[4] == "schedules":
        return (Role.PRODUCER, Role.CONSUMER) if method in ("GET", "HEAD") else Role.PRODUCER
    if parts[4] == "groups":
        rest = parts[6:] if len(parts) > 6 else []
        if (not rest and method == "PUT") or (rest and rest[0] == "dlq"):
            return Role.ADMIN
        return Role.CONSUMER
    return Role.ADMIN


class ApiKeys:
    def __init__(self, keys: dict[str, Role]) -> None:
        self._encoded = [(key.encode(), role) for key, role in keys.items()]

    def _role_of(self, token: str) -> Role | None:
        """The key's role, compared in constant time against every key (a dict lookup's
        timing would tell how much of a guess matched)."""
        given = token.encode()
        granted = None
        for key, role in self._encoded:
            if hmac.compare_digest(key, given):
                granted = role
        return granted

    def check(self, scope: Scope) -> None:
        """Raise Unauthorized or Forbidden for a request its key does not allow; else let
        it in, with the key's role in the scope (for who_am_i)."""
        role = required_role(scope["method"], scope["path"])
        if role is None:
            return
        token = ""
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, rest = value.decode("latin-1").partition(" ")
                if scheme.lower() == "bearer":
                    token = rest.strip()
        granted = self._role_of(token) if token else None
        if granted is None:
            raise Unauthorized(
                "unknown API key" if token else "send 'Authorization: Bearer <api key>'"
            )
        scope["rocktimer.role"] = granted.value
        allowed = role if isinstance(role, tuple) else (role,)
        if scope["path"] in ANY_ROLE_PATHS:
            allowed = tuple(Role)
        if granted not in allowed and granted is not Role.ADMIN:
            needed = " or ".join(repr(r.value) for r in allowed)
            raise Forbidden(f"this API key has role {granted.value!r}; {needed} is needed")
