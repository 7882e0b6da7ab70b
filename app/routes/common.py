"""What every route module shares: body parsing, JSON replies, documented error replies."""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from app.errors import invalid
from app.schemas import Problem

M = TypeVar("M", bound=BaseModel)

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": Problem, "content": {"application/problem+json": {}}}
    for code in (400, 401, 403, 404, 409, 413, 422, 429, 503)
}


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI for a body we parse ourselves (raw bytes → model, skipping FastAPI's pass)."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


async def parse(request: Request, model: type[M]) -> M:
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        raise invalid(exc) from None


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")
