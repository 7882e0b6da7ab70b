"""Prometheus metrics, one registry per app (tests run several apps in one process).

Everything is read at scrape time from what the engine keeps anyway: the counters of the
browsing endpoints (workers/ops/views.py) for the per-group gauges, the writer's and the
syncer's histograms, the consumption events. Nothing here is counted twice.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from app.push.pusher import Pusher
from workers.engine import Engine
from workers.histogram import Histogram
from workers.lag import DUE_COUNT_CAP
from workers.ops import views

REQUEST_BOUNDS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30)
METRICS_MAX_TOPICS = 1_000  # per scrape: the per-group gauges stay a bounded set of series
METRICS_MAX_GROUPS = 100  # per topic
EVENTS = {
    "acks": "Messages acknowledged",
    "nacks": "Messages failed by a nack",
    "expiries": "Invisibilities that ran out (failed attempts)",
    "dead_letters": "Messages moved to a dead-letter queue",
    "redrives": "Dead letters put back into their group's flow",
}


class RequestTimes:
    """Request latency by route template and method (the fast path's routes included)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_route: dict[tuple[str, str], Histogram] = {}

    def observe(self, route: str, method: str, seconds: float) -> None:
        hist = self._by_route.get((route, method))
        if hist is None:
            with self._lock:
                hist = self._by_route.setdefault((route, method), Histogram(REQUEST_BOUNDS_S))
        hist.observe(seconds)

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            "rocktimer_request_duration_seconds",
            "HTTP request latency, by route template and method",
            labels=["route", "method"],
        )
        with self._lock:
            routes = sorted(self._by_route.items())
        for (route, method), hist in routes:
            buckets, total = _buckets(hist)
            family.add_metric([route, method], buckets, total)
        return family


def _buckets(hist: Histogram, scale: float = 1) -> tuple[list[tuple[str, float]], float]:
    """Cumulative Prometheus buckets of ``hist`` and its sum, times ``scale``."""
    counts, total = hist.snapshot()
    cumulative, out = 0, list[tuple[str, float]]()
    for bound, n in zip((*hist.bounds, None), counts, strict=True):
        cumulative += n
        out.append(("+Inf" if bound is None else repr(bound * scale), cumulative))
    return out, total * scale


def histogram(name: str, doc: str, hist: Histogram, scale: float = 1) -> HistogramMetricFamily:
    buckets, total = _buckets(hist, scale)
    return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=total)


def _group_gauges(engine: Engine) -> Sequence[GaugeMetricFamily]:
    """Backlog, in flight, retrying and dead per (topic, group): the same counts as
    GET /v1/topics/{topic}/groups."""
    labels = ["topic", "group"]
    families = {
        "backlog": GaugeMetricFamily(
            "rocktimer_group_backlog", "Messages the group has not received yet", labels=labels
        ),
        "inflight": GaugeMetricFamily(
            "rocktimer_group_inflight", "Received, not yet acked or failed", labels=labels
        ),
        "retrying": GaugeMetricFamily(
            "rocktimer_group_retrying", "Failed, waiting for the retry delay", labels=labels
        ),
        "dead": GaugeMetricFamily(
            "rocktimer_group_dead", "Dead letters from this topic", labels=labels
        ),
    }
    topics, _ = views.topics(engine.store, None, METRICS_MAX_TOPICS)
    for t in topics:
        groups, _ = views.groups(engine.store, t.topic, None, METRICS_MAX_GROUPS)
        for g in groups:
            for field, family in families.items():
                family.add_metric([t.topic, g.group], getattr(g, field))
    return list(families.values())


def _push_families(pusher: Pusher) -> Sequence[Metric]:
    """Per push group: POSTs that acked and that failed, and those under way."""
    labels = ["topic", "group"]
    pushes = CounterMetricFamily(
        "rocktimer_pushes", "Webhook POSTs by outcome", labels=[*labels, "outcome"]
    )
    inflight = GaugeMetricFamily(
        "rocktimer_push_inflight", "Webhook POSTs under way", labels=labels
    )
    for (topic, group), tally in sorted(pusher.tallies.items()):
        pushes.add_metric([topic, group, "ok"], tally.ok)
        pushes.add_metric([topic, group, "failed"], tally.failed)
        inflight.add_metric([topic, group], tally.in_flight)
    return pushes, inflight


class EngineCollector(Collector):
    def __init__(self, engine: Engine, requests: RequestTimes, pusher: Pusher) -> None:
        self.engine = engine
        self.requests = requests
        self.pusher = pusher

    def collect(self) -> Iterator[Metric]:
        e = self.engine
        yield GaugeMetricFamily(
            "rocktimer_pending_timers", "Scheduled messages not yet due", e.writer.pending_timers
        )
        yield GaugeMetricFamily(
            "rocktimer_writer_queue_depth",
            "Client ops waiting for the writer",
            e.writer.queue_depth,
        )
        yield GaugeMetricFamily(
            "rocktimer_put_queue_chunks",
            "Scanned chunks waiting for the deliverer",
            e.put_queue.qsize(),
        )
        yield GaugeMetricFamily(
            "rocktimer_long_polls", "Clients waiting in a long poll", e.long_polls.waiting
        )
        yield GaugeMetricFamily("rocktimer_streams", "Streaming receives open", len(e.streams))
        yield GaugeMetricFamily(
            "rocktimer_due_backlog_timers",
            "Due timers not yet in their topic log (those not yet scanned: up to "
            f"{DUE_COUNT_CAP:,})",
            e.lag.timers(),
        )
        yield GaugeMetricFamily(
            "rocktimer_due_backlog_oldest_seconds",
            "How long the oldest due timer not yet in its topic log has been due",
            e.lag.age_ms() / 1000,
        )
        yield CounterMetricFamily(
            "rocktimer_sends_refused_lagging",
            "Sends answered 429 because deliveries lagged",
            e.lag.refused,
        )
        memory = GaugeMetricFamily(
            "rocktimer_rocksdb_memory_bytes",
            "Memory RocksDB holds, by kind (memtables, block_cache, table_readers)",
            labels=["kind"],
        )
        for kind, size in e.store.memory().items():
            memory.add_metric([kind], size)
        yield memory
        yield from _group_gauges(e)
        yield CounterMetricFamily(
            "rocktimer_delivered_timers", "Timers moved into topic logs", e.deliverer.moved
        )
        yield CounterMetricFamily("rocktimer_commits", "Group commits written", e.writer.batches)
        yield CounterMetricFamily(
            "rocktimer_retention_lost",
            "Messages a group had not consumed when their retention ended (gone for it)",
            e.sweeper.lost,
        )
        for event, doc in EVENTS.items():
            yield CounterMetricFamily(f"rocktimer_{event}", doc, e.tallies[event])
        yield histogram(
            "rocktimer_delivery_lateness_seconds",
            "Delivered minus max(deliver_at, accepted at), per message",
            e.lateness_ms,
            scale=1 / 1000,
        )
        yield histogram(
            "rocktimer_wal_fsync_seconds", "Time of each WAL fsync", e.writer.fsync_seconds
        )
        yield histogram(
            "rocktimer_writer_batch_ops", "Ops per group commit (batch)", e.writer.batch_ops
        )
        if (changelog := e.writer.changelog) is not None:  # cluster mode (docs/cluster.md)
            yield CounterMetricFamily(
                "rocktimer_changelog_records",
                "Changelog records appended to JetStream (a group commit or several each)",
                changelog.records,
            )
            yield histogram(
                "rocktimer_changelog_append_seconds",
                "A changelog record's publish to its JetStream acknowledgement",
                changelog.append_seconds,
            )
        yield from _push_families(self.pusher)
        yield self.requests.family()


def registry_for(engine: Engine, requests: RequestTimes, pusher: Pusher) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(EngineCollector(engine, requests, pusher))
    return registry
