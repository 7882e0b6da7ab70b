"""The contract's numbers (app/defaults.py) are what the OpenAPI document, the settings,
the CLI and the pipeline say: each is read from there, never typed again."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from app import defaults
from app.config import Settings
from app.main import create_app
from cli import connection
from pipeline import cli as pipeline_cli


def _openapi(tmp_path: Path) -> dict[str, Any]:
    document: dict[str, Any] = create_app(Settings(data_dir=str(tmp_path / "d"))).openapi()
    return document


def test_the_openapi_document_states_the_defaults(tmp_path: Path) -> None:
    doc = _openapi(tmp_path)
    receive = doc["components"]["schemas"]["ReceiveRequest"]["properties"]
    assert receive["invisible_ms"]["default"] == defaults.INVISIBLE_MS
    assert receive["invisible_ms"]["minimum"] == defaults.INVISIBLE_MS_MIN
    assert receive["invisible_ms"]["maximum"] == defaults.INVISIBLE_MS_MAX
    assert receive["wait_ms"]["maximum"] == defaults.RECEIVE_WAIT_MS_MAX
    assert receive["max_messages"]["maximum"] == defaults.MAX_BATCH
    stream = doc["paths"]["/v1/topics/{topic}/groups/{group}/stream"]["get"]
    params = {p["name"]: p["schema"] for p in stream["parameters"]}
    assert params["invisible_ms"]["default"] == defaults.INVISIBLE_MS
    assert params["max_in_flight"]["default"] == defaults.STREAM_MAX_IN_FLIGHT
    assert params["max_in_flight"]["maximum"] == defaults.STREAM_MAX_IN_FLIGHT_LIMIT
    described = stream["responses"]["200"]["description"]
    assert f"({defaults.STREAM_KEEPALIVE_MS // 1000} s)" in described


def test_settings_cli_and_pipeline_read_the_same_defaults() -> None:
    settings = Settings()
    assert (settings.host, settings.port) == (defaults.HOST, defaults.PORT)
    assert settings.stream_keepalive_ms == defaults.STREAM_KEEPALIVE_MS
    assert connection.DEFAULT_URL == defaults.URL == f"http://{settings.host}:{settings.port}"
    assert connection.LONGEST_POLL_S * 1000 == defaults.RECEIVE_WAIT_MS_MAX
    url = pipeline_cli.parser("x", "y", service=True).parse_args([]).url
    assert url == os.environ.get("ROCKTIMER_URL", defaults.URL)
