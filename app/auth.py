"""API keys (``ROCKTIMER_API_KEYS``): a gate of the front door (app/front.py), set only when
keys are configured, that lets a request in if its key has a role the route it reaches
declares: the route's tag (producer, consumer, admin), or ``allow(...)`` on the route where
the tag does not say it all. The roles are api.md's table:

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
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from fastapi.routing import APIRoute
from starlette.routing import Match
from starlette.types import Scope

from app.config import Role
from app.errors import Forbidden, Unauthorized, flat_routes

F = TypeVar("F", bound=Callable[..., Any])
Roles = tuple[Role, ...]

# A route's tag is the role it serves (api.md's table), unless it declares its roles itself.
ROLE_OF_TAG: dict[str, Roles] = {
    "producer": (Role.PRODUCER,),
    "consumer": (Role.CONSUMER,),
    "admin": (Role.ADMIN,),
}
_DECLARED = "rocktimer_roles"


def allow(*roles: Role) -> Callable[[F], F]:
    """Declare on a route's function the roles that may call it, where its tag does not
    say it all (put it under the route's decorator)."""

    def declare(call: F) -> F:
        setattr(call, _DECLARED, roles)
        return call

    return declare


def roles_of(route: APIRoute) -> Roles | None:
    """The roles a route declares (any one will do; admin may call anything), or None for
    an open one (the service routes, the console's page)."""
    declared: Roles | None = getattr(route.endpoint, _DECLARED, None)
    if declared is not None:
        return declared
    for tag in route.tags:
        if isinstance(tag, str) and tag in ROLE_OF_TAG:
            return ROLE_OF_TAG[tag]
    return None


class ApiKeys:
    def __init__(self, keys: dict[str, Role], routes: Sequence[Any]) -> None:
        self._encoded = [(key.encode(), role) for key, role in keys.items()]
        self._routes = [
            (route, roles_of(route)) for route in flat_routes(routes) if isinstance(route, APIRoute)
        ]

    def required(self, scope: Scope) -> Roles | None:
        """The roles the route a request reaches declares; a /v1 path no route serves asks
        for admin (so a guess at the URL space learns nothing without a key)."""
        if scope["method"] == "HEAD":  # served as GET (app/limits.py HeadAsGet)
            scope = {**scope, "method": "GET"}
        partial: Roles | None = None
        found_partial = False
        for route, roles in self._routes:
            matched, _ = route.matches(scope)
            if matched is Match.FULL:
                return roles
            if matched is Match.PARTIAL and not found_partial:  # another method's route
                partial, found_partial = roles, True
        if found_partial:
            return partial
        return (Role.ADMIN,) if scope["path"].startswith("/v1/") else None

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
        allowed = self.required(scope)
        if allowed is None:
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
        if granted not in allowed and granted is not Role.ADMIN:
            needed = " or ".join(repr(r.value) for r in allowed)
            raise Forbidden(f"this API key has role {granted.value!r}; {needed} is needed")
