"""Settings, in one place: every tunable a user may need, from ``ROCKTIMER_*`` env vars."""

from __future__ import annotations

import enum
from functools import cached_property
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from workers.runner import EngineConfig
from workers.scanner import PUT_QUEUE_CHUNKS, SCAN_CHUNK

MiB = 1024 * 1024
TEN_YEARS_MS = 315_576_000_000  # 10 x 365.25 days, api.md's default maximum delay


class Role(enum.StrEnum):
    PRODUCER = "producer"
    CONSUMER = "consumer"
    ADMIN = "admin"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ROCKTIMER_", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    data_dir: str = "./data"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = "text"
    access_log: bool = True  # one line per request at info (method, path, status, ms)
    max_delay_ms: int = Field(TEN_YEARS_MS, ge=0)
    max_body_bytes: int = Field(4 * MiB, ge=1)
    max_request_bytes: int = Field(5 * MiB, ge=1)
    max_properties: int = Field(64, ge=0)
    writer_queue_size: int = Field(10_000, ge=1)
    scan_chunk: int = Field(SCAN_CHUNK, ge=1)
    put_queue_chunks: int = Field(PUT_QUEUE_CHUNKS, ge=1)
    sweep_interval_ms: int = Field(60_000, ge=10)
    min_free_bytes: int = Field(64 * MiB, ge=0)
    retention_ms: int = Field(72 * 3_600_000, ge=1_000)
    api_keys: dict[str, Role] = Field(default_factory=dict)

    @cached_property
    def engine(self) -> EngineConfig:
        return EngineConfig(
            data_dir=self.data_dir,
            writer_queue_size=self.writer_queue_size,
            scan_chunk=self.scan_chunk,
            put_queue_chunks=self.put_queue_chunks,
            sweep_interval_ms=self.sweep_interval_ms,
            min_free_bytes=self.min_free_bytes,
            retention_ms=self.retention_ms,
        )
