"""What every route module shares: body parsing and JSON replies."""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from app.errors import invalid
from storage.errors import UnsupportedMediaType

M = TypeVar("M", bound=BaseModel)

JSON_TYPES = ("application/json",)


def require_json(request: Request) -> None:
    """A body must be JSON: a Content-Type that says otherwise is 415 (none is taken as JSON)."""
    declared = request.headers.get("content-type")
    if declared is None:
        return
    media = declared.split(";", 1)[0].strip().lower()
    if media not in JSON_TYPES and not (
        media.startswith("application/") and media.endswith("+json")
    ):
        raise UnsupportedMediaType(f"send the body as application/json, not {media!r}")


async def parse(request: Request, model: type[M]) -> M:
    require_json(request)
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        raise invalid(exc) from None


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")
