"""Settings, in one place: every tunable a user may need, from ``ROCKTIMER_*`` env vars."""

from __future__ import annotations

import enum
from dataclasses import fields
from functools import cached_property
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from app import defaults
from app.http import HEAD_TIMEOUT_MS
from workers.engine import EngineConfig
from workers.rules.webhook import DEFAULT_ALLOWED_HOSTS, allowed_hosts

# The engine's defaults are EngineConfig's own; the settings only add bounds and env names.
ENGINE_DEFAULTS: dict[str, int] = {
    f.name: f.default for f in fields(EngineConfig) if isinstance(f.default, int)
}

# EngineConfig's fields that are settings: all but the partition, which the cluster sets
# per engine (app/cluster/worker.py).
ENGINE_SETTINGS: frozenset[str] = frozenset(f.name for f in fields(EngineConfig)) - {"partition"}

MiB = 1024 * 1024
TEN_YEARS_MS = 315_576_000_000  # 10 x 365.25 days, api.md's default maximum delay
# The longest maximum delay a setting may ask for: every time a send or a schedule can
# reach stays a valid date (a cron schedule's fires are found with datetime, which ends
# at the year 9999) and a valid timer key, whatever the clock says.
MAX_DELAY_LIMIT_MS = 10 * TEN_YEARS_MS
DAY_MS = 86_400_000  # the longest interval a worker's period or a keep-alive may be set to
# ROCKTIMER_CLUSTER: empty, or nats:// (or tls://) host:port URLs, comma-separated.
CLUSTER_URLS = r"^$|^(nats|tls)://[^\s,/]+:[0-9]{1,5}(,(nats|tls)://[^\s,/]+:[0-9]{1,5})*$"


class Role(enum.StrEnum):
    PRODUCER = "producer"
    CONSUMER = "consumer"
    ADMIN = "admin"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ROCKTIMER_", frozen=True)

    host: str = defaults.HOST
    port: int = Field(defaults.PORT, ge=0, le=65535)
    # Worker processes on the one port, each owning some of the data dir's partitions
    # (app/cluster/); 1 is one process as the engine was built for; 0: one per core the
    # process may run on, at most the data dir's partitions (app/cluster/layout.py).
    workers: int = Field(0, ge=0, le=256)
    # Partitions of a new data dir (then fixed, app/cluster/layout.py); 0: as the data dir
    # records, or one per worker for a new one.
    partitions: int = Field(0, ge=0, le=1_024)
    data_dir: str = "./data"
    # Cluster mode (app/cluster/node.py): the NATS servers, comma-separated nats://host:port;
    # empty: one machine, and NATS is never imported.
    cluster: str = Field(
        "", pattern=CLUSTER_URLS, description="nats://host:port URLs, comma-separated"
    )
    # This node's name in the cluster (required in cluster mode).
    node_id: str = Field(
        "", pattern=r"^[A-Za-z0-9_-]{0,64}$", description="up to 64 of A-Z a-z 0-9 _ -"
    )
    # Where the other nodes reach this node's HTTP; empty: host:port.
    advertise: str = Field(
        "", pattern=r"^([^\s:/\[\]]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$|^$", description="host:port"
    )
    # JetStream replicas of the changelog and the cluster's KV buckets.
    replicas: int = Field(3, ge=1, le=5)
    # A partition owner's lease: renewed every quarter of it; a node silent this long is gone.
    lease_ms: int = Field(4_000, ge=1_000, le=60_000)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = "text"
    access_log: bool = True  # one line per request at info (method, path, status, ms)
    max_delay_ms: int = Field(TEN_YEARS_MS, ge=0, le=MAX_DELAY_LIMIT_MS)
    max_body_bytes: int = Field(4 * MiB, ge=1)
    max_request_bytes: int = Field(5 * MiB, ge=1)
    max_properties: int = Field(64, ge=0)
    writer_queue_size: int = Field(ENGINE_DEFAULTS["writer_queue_size"], ge=1)
    scan_chunk: int = Field(ENGINE_DEFAULTS["scan_chunk"], ge=1)
    put_queue_chunks: int = Field(ENGINE_DEFAULTS["put_queue_chunks"], ge=1)
    move_pace_ms: int = Field(ENGINE_DEFAULTS["move_pace_ms"], ge=0, le=1_000)
    sweep_interval_ms: int = Field(ENGINE_DEFAULTS["sweep_interval_ms"], ge=10, le=DAY_MS)
    min_free_bytes: int = Field(ENGINE_DEFAULTS["min_free_bytes"], ge=0)
    retention_ms: int = Field(ENGINE_DEFAULTS["retention_ms"], ge=1_000)
    dlq_retention_ms: int = Field(ENGINE_DEFAULTS["dlq_retention_ms"], ge=1_000)
    max_receive_bytes: int = Field(ENGINE_DEFAULTS["max_receive_bytes"], ge=1)
    events: bool = bool(ENGINE_DEFAULTS["events"])
    events_seal_ms: int = Field(ENGINE_DEFAULTS["events_seal_ms"], ge=10, le=DAY_MS)
    events_retention_ms: int = Field(ENGINE_DEFAULTS["events_retention_ms"], ge=1_000)
    events_seal_process: bool = bool(ENGINE_DEFAULTS["events_seal_process"])
    # Deliveries this far behind (the oldest due timer not yet in its topic log): sends
    # get 429 + Retry-After and /readyz says "lagging", until back under half of it.
    due_backlog_limit_ms: int = Field(ENGINE_DEFAULTS["due_backlog_limit_ms"], ge=1)
    # A request line and headers not complete this long after their first byte (a new
    # connection: after it was made) end the connection (app/http.py).
    header_timeout_ms: int = Field(HEAD_TIMEOUT_MS, ge=100, le=300_000)
    # A stream with nothing to send says ": keep-alive" this often (proxies drop idle ones).
    stream_keepalive_ms: int = Field(defaults.STREAM_KEEPALIVE_MS, ge=10, le=DAY_MS)
    api_keys: dict[str, Role] = Field(default_factory=dict)
    # Without API keys, the names (Host) the service answers to besides IP addresses,
    # localhost and ``host``, comma-separated: a guard against DNS rebinding (app/origin.py).
    served_hosts: str = ""
    # Hosts a group's push url may name, comma-separated ("*.example.com": its subdomains;
    # "*": any host). The service POSTs from inside the network: keep it to the receivers.
    push_allowed_hosts: str = DEFAULT_ALLOWED_HOSTS

    @cached_property
    def beyond_max_delay(self) -> str:
        """Why a time too far off is refused (a send's or a schedule's field, 422)."""
        return f"more than the maximum delay of {self.max_delay_ms} ms from now"

    @cached_property
    def allowed_push_hosts(self) -> frozenset[str]:
        return allowed_hosts(self.push_allowed_hosts)

    @cached_property
    def engine(self) -> EngineConfig:
        """The engine's part of the settings: every EngineConfig field but the
        partition, by name."""
        return EngineConfig(**{name: getattr(self, name) for name in ENGINE_SETTINGS})
