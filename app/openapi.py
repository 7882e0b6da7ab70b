"""What /openapi.json declares beyond FastAPI's defaults, so generated clients read well.

Each operation lists the status codes it can return (``replies``), every error as an
``application/problem+json`` Problem; bodies the routes parse by hand are named schemas
(``json_body``), and ``install`` adds those schemas and Problem to the components.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from app.errors import PROBLEM
from app.schemas import REQUEST_MODELS, Problem

REF = "#/components/schemas/{model}"

# Code groups an operation is built from (see each route's ``responses=``).
V1 = (401, 403, 422, 503)  # every /v1 call: API keys, path parameters, the store
BODY = (400, 413, 415, 422)  # a JSON body the route parses
WRITE = (429, 503)  # a change that goes through the writer's bounded queue

# When each error code happens; an operation may say more (``replies(why=...)``).
_WHEN = {
    400: "The body is not valid JSON.",
    401: "No API key, or an unknown one (only when ROCKTIMER_API_KEYS is set).",
    403: "The API key's role may not call this operation.",
    404: "Not found.",
    409: "The resource's state forbids this.",
    413: "The body, or the whole request, is over its configured limit.",
    415: "The body is declared as something other than JSON.",
    422: "A field, path or query parameter is invalid: `errors` names each one and why.",
    429: "The write queue is full: retry after `Retry-After` seconds.",
    503: "The store is failing or the service is stopping: retry after `Retry-After` seconds.",
}
_RETRY_AFTER = {
    "Retry-After": {"description": "Seconds to wait before retrying", "schema": {"type": "integer"}}
}


def _problem(code: int, why: str | None) -> dict[str, Any]:
    reply: dict[str, Any] = {
        "description": why or _WHEN[code],
        "content": {PROBLEM: {"schema": {"$ref": REF.format(model=Problem.__name__)}}},
    }
    if code in (429, 503):
        reply["headers"] = _RETRY_AFTER
    return reply


def replies(
    ok: dict[int, type[BaseModel]], *errors: int, why: dict[int, str] | None = None
) -> dict[int | str, dict[str, Any]]:
    """An operation's ``responses=``: its success models, then a Problem reply for each
    error code it can return (duplicates among the code groups are fine)."""
    out: dict[int | str, dict[str, Any]] = {
        code: {"model": model, "description": HTTPStatus(code).phrase} for code, model in ok.items()
    }
    for code in sorted(set(errors)):
        out[code] = _problem(code, (why or {}).get(code))
    return out


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI for a body we parse ourselves (raw bytes → model, skipping FastAPI's pass)."""
    ref = {"$ref": REF.format(model=model.__name__)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def install(app: FastAPI) -> None:
    """Add the hand-parsed request bodies and Problem to the document's components."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = original()
        models: tuple[type[BaseModel], ...] = (*REQUEST_MODELS, Problem)
        _, defs = models_json_schema([(m, "validation") for m in models], ref_template=REF)
        schema.setdefault("components", {}).setdefault("schemas", {}).update(defs.get("$defs", {}))
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
