"""API keys: a request needs a role its route declares (its tag, or ``allow``), not a
role guessed again from the URL's shape."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute

from app.auth import ApiKeys, allow
from app.config import Role, Settings
from app.errors import Forbidden, Unauthorized, flat_routes
from app.main import create_app

P, C, A = Role.PRODUCER, Role.CONSUMER, Role.ADMIN
# api.md's table, by operation.
EXPECTED: dict[str, tuple[Role, ...] | None] = {
    "send_message": (P,),
    "send_messages": (P,),
    "get_message": (P,),
    "reschedule_message": (P,),
    "cancel_message": (P,),
    "list_messages": (P,),
    "put_schedule": (P,),
    "delete_schedule": (P,),
    "get_schedule": (P, C),
    "list_schedules": (P, C),
    "receive_messages": (C,),
    "stream_messages": (C,),
    "ack_messages": (C,),
    "nack_messages": (C,),
    "change_invisibility": (C,),
    "get_group_message": (C,),
    "get_group_settings": (C,),
    "list_topics": (C,),
    "list_groups": (C,),
    "put_group_settings": (A,),
    "list_dead_letters": (A,),
    "get_dead_letter": (A,),
    "redrive_dead_letter": (A,),
    "who_am_i": tuple(Role),
    "get_stats": tuple(Role),
    "healthz": None,
    "readyz": None,
    "metrics": None,
    "get_limits": None,
    "docs": None,
    "console": None,
}


def _scope(method: str, path: str, token: str | None = None) -> dict[str, Any]:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    return {"type": "http", "method": method, "path": path, "root_path": "", "headers": headers}


def _concrete(template: str) -> str:
    for name, value in (("topic", "t"), ("group", "g"), ("msg_id", "m"), ("schedule_id", "s")):
        template = template.replace("{" + name + "}", value)
    return template


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    return create_app(Settings(data_dir=str(tmp_path_factory.mktemp("auth") / "data")))


def test_every_route_needs_the_roles_api_md_gives_it(app: FastAPI) -> None:
    keys = ApiKeys({"k": P}, app.router.routes)
    routes = [r for r in flat_routes(app.router.routes) if isinstance(r, APIRoute)]
    assert sorted(r.name for r in routes) == sorted(EXPECTED)
    for route in routes:
        for method in route.methods or ():
            path = _concrete(route.path)
            assert keys.required(_scope(method, path)) == EXPECTED[route.name], route.name
            if method == "GET":
                assert keys.required(_scope("HEAD", path)) == EXPECTED[route.name], route.name


def test_a_path_no_route_serves_asks_for_admin_under_v1_only(app: FastAPI) -> None:
    keys = ApiKeys({"k": P}, app.router.routes)
    assert keys.required(_scope("GET", "/v1/nothing/here")) == (A,)
    assert keys.required(_scope("GET", "/v1/topics/t/unknown")) == (A,)
    assert keys.required(_scope("GET", "/ui/static/app.js")) is None
    # Another method of a served path: that route's roles (then 405 from FastAPI).
    assert keys.required(_scope("DELETE", "/v1/topics/t/groups/g")) == (C,)


def test_the_role_is_the_routes_declaration_not_the_urls_shape() -> None:
    """A consumer route under a producer-looking URL, and one that declares its roles."""
    router = APIRouter(prefix="/v1/topics/{topic}/messages", tags=["consumer"])

    @router.get("/peek")
    async def peek() -> None: ...

    @router.get("/both")
    @allow(P, C)
    async def both() -> None: ...

    app = FastAPI()
    app.include_router(router)
    keys = ApiKeys({"p": P, "c": C}, app.router.routes)
    keys.check(_scope("GET", "/v1/topics/t/messages/peek", "c"))
    with pytest.raises(Forbidden):
        keys.check(_scope("GET", "/v1/topics/t/messages/peek", "p"))
    keys.check(_scope("GET", "/v1/topics/t/messages/both", "p"))
    with pytest.raises(Unauthorized):
        keys.check(_scope("GET", "/v1/topics/t/messages/both", "nope"))
