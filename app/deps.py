"""Annotated dependencies: the engine, the settings, and the API-key role check."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Path, Request

from app.config import Role, Settings
from app.errors import Forbidden, Unauthorized
from app.schemas import MSG_ID_PATTERN, NAME_PATTERN
from workers.runner import Engine


# async on purpose: FastAPI runs a plain `def` dependency in its thread pool, a thread
# hop per request on the hottest path.
async def get_engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


EngineDep = Annotated[Engine, Depends(get_engine)]
SettingsDep = Annotated[Settings, Depends(get_settings)]

TopicPath = Annotated[str, Path(pattern=NAME_PATTERN, description="Topic name (% as %25)")]
GroupPath = Annotated[str, Path(pattern=NAME_PATTERN, description="Consumer group name")]
MsgIdPath = Annotated[str, Path(pattern=MSG_ID_PATTERN, description="Message id (uniq key)")]


def require(role: Role) -> Callable[[Request], Awaitable[None]]:
    """A dependency: with API keys configured, the caller's key must carry ``role`` (or admin)."""

    async def check(request: Request) -> None:
        keys: dict[str, Role] = request.app.state.settings.api_keys
        if not keys:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("send 'Authorization: Bearer <api key>'")
        granted = keys.get(token.strip())
        if granted is None:
            raise Unauthorized("unknown API key")
        if granted is not role and granted is not Role.ADMIN:
            raise Forbidden(f"this API key has role {granted.value!r}; {role.value!r} is needed")

    return check
