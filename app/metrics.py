"""Prometheus metrics, one registry per app (tests run several apps in one process)."""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from workers.lag import DUE_COUNT_CAP
from workers.runner import Engine

# Lateness buckets in ms: the target is p99 <= 10 ms, so resolve the low end finely.
LATENESS_BUCKETS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 60_000)


class LatenessHistogram:
    """delivered - deliver_at, observed a whole move at a time (a storm moves millions)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts = [0] * (len(LATENESS_BUCKETS_MS) + 1)
        self.total_ms = 0

    def observe_many(self, values_ms: Iterable[int]) -> None:
        local = [0] * len(self.counts)
        total = 0
        # A move of thousands mostly shares a few lateness values: count them in C first.
        for v, n in Counter(values_ms).items():
            local[bisect.bisect_left(LATENESS_BUCKETS_MS, v)] += n
            total += v * n
        with self._lock:
            for i, n in enumerate(local):
                self.counts[i] += n
            self.total_ms += total

    def family(self) -> HistogramMetricFamily:
        with self._lock:
            counts, total = list(self.counts), self.total_ms
        cumulative, buckets = 0, []
        for bound, n in zip((*LATENESS_BUCKETS_MS, None), counts, strict=True):
            cumulative += n
            buckets.append(("+Inf" if bound is None else str(bound / 1000), cumulative))
        return HistogramMetricFamily(
            "rocktimer_delivery_lateness_seconds",
            "Delivered minus deliver_at, per message",
            buckets=buckets,
            sum_value=total / 1000,
        )


class EngineCollector(Collector):
    def __init__(self, engine: Engine, lateness: LatenessHistogram) -> None:
        self.engine = engine
        self.lateness = lateness

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
            "rocktimer_long_polls", "Receivers waiting in a long poll", e.long_polls.waiting
        )
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
        yield CounterMetricFamily(
            "rocktimer_delivered_timers", "Timers moved into topic logs", e.deliverer.moved
        )
        yield CounterMetricFamily("rocktimer_commits", "Group commits written", e.writer.batches)
        yield CounterMetricFamily(
            "rocktimer_retention_lost",
            "Messages a group had not consumed when their retention ended (gone for it)",
            e.sweeper.lost,
        )
        yield self.lateness.family()


def registry_for(engine: Engine, lateness: LatenessHistogram) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(EngineCollector(engine, lateness))
    return registry
