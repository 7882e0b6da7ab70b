"""Read-only listings for the console and the CLI (api.md, Browsing): topics with their
counts, a topic's groups with theirs, a topic's scheduled messages in due order, and how
many messages fall due in the time ahead.

Nothing here counts by scanning: topic and group counts are kept by the ops that change
them, in the same WriteBatch (Txn.count_topic / count_group); a group's backlog is the gap
between a lane's next seq and the group's cursor. Pages are bounded in what they return
and in what they read.
"""

from __future__ import annotations

from typing import NamedTuple

from storage import keys
from storage.records import MessageRecord, decode_counts
from storage.store import CF, RocksStore
from workers.rules import tagfilter
from workers.rules.retry import decode_settings, stored_filter
from workers.rules.webhook import PushSettings
from workers.timers import message

LIST_SCAN_BUDGET = 10_000  # timer keys one page of scheduled messages may read: the
# timers of every topic share one keyspace, so a rare topic's page may come back short


SETTINGS_PAGE = 1_000  # group settings records read per scan (push_groups)


class TopicSummary(NamedTuple):
    topic: str
    scheduled: int  # timers of the topic not yet due
    delivered: int  # messages moved into its log since the topic began
    cancelled: int  # messages cancelled since the topic began


class GroupSummary(NamedTuple):
    group: str
    backlog: int  # in the topic's log (or back in the group's retry lane), not received yet
    inflight: int  # received, neither acked nor failed yet
    retrying: int  # failed, waiting for the retry delay
    dead: int  # dead letters from this topic


def topics(store: RocksStore, after: str | None, limit: int) -> tuple[list[TopicSummary], bool]:
    """Up to ``limit`` topics after ``after``, by name; and whether more follow."""
    prefix = keys.TOPIC_COUNTS_PREFIX
    start = keys.successor(keys.topic_counts_key(after)) if after else prefix
    found = store.scan(CF.META, start, keys.prefix_end(prefix), limit + 1)
    out = [
        TopicSummary(key[len(prefix) :].decode(), *decode_counts(value))
        for key, value in found[:limit]
    ]
    return out, len(found) > limit


def groups(
    store: RocksStore, topic: str, after: str | None, limit: int
) -> tuple[list[GroupSummary], bool]:
    """Up to ``limit`` groups of ``topic`` after ``after``, by name; and whether more follow.

    A group exists from its first receive (its cursor) or its settings (a PUT)."""
    names: set[str] = set()
    for prefix in (keys.cursor_key(keys.topic_lane(topic), ""), keys.group_key(topic, "")):
        start = prefix + after.encode() + keys.SEP if after else prefix
        found = store.scan(CF.META, start, prefix + b"\xff", limit + 1)
        names.update(key[len(prefix) :].decode() for key, _ in found)
    ordered = sorted(names)
    return [group_summary(store, topic, g) for g in ordered[:limit]], len(ordered) > limit


def group_summary(store: RocksStore, topic: str, group: str) -> GroupSummary:
    inflight, retrying, dead = decode_counts(
        store.get(CF.META, keys.group_counts_key(topic, group))
    )
    wanted = tagfilter.tags(stored_filter(store.get(CF.META, keys.group_key(topic, group))))
    backlog = _unread(store, topic, group, wanted) + _unread(store, topic, group, None, retry=True)
    return GroupSummary(group, backlog, inflight, retrying, dead)


def _unread(
    store: RocksStore, topic: str, group: str, wanted: frozenset[str] | None, retry: bool = False
) -> int:
    """Entries of the topic's log (or the group's retry lane) past the group's cursor that
    retention has not reclaimed; with a filter (``wanted``), only those it would receive
    (a retry lane holds only messages the group received)."""
    lane = keys.retry_lane(topic, group) if retry else keys.topic_lane(topic)
    end, cursor, swept = (
        keys.read_u64(raw) if raw else 0
        for raw in store.get_many(
            CF.META, [keys.next_seq_key(lane), keys.cursor_key(lane, group), keys.swept_key(lane)]
        )
    )
    position = max(cursor, swept)
    if wanted is None:
        return max(0, end - position)
    return tagfilter.unread(store, topic, wanted, position)


def scheduled(
    store: RocksStore, topic: str, after: bytes | None, limit: int, now_ms: int
) -> tuple[list[MessageRecord], bytes | None]:
    """``topic``'s scheduled messages in due order, from after timer key ``after``; and the
    timer key to go on after (None: that was the last page). A page reads at most
    ``LIST_SCAN_BUDGET`` timer keys, so it may hold fewer than ``limit`` (even none) and
    still have a next one. It starts at the watermark (below it: moved keys, tombstones)
    unless the clock stepped back behind it: messages sent since may be due below it."""
    start = keys.trusted_watermark(store.get(CF.META, keys.WATERMARK_KEY), now_ms)
    if after is not None:
        start = max(start, keys.successor(after))
    target = keys.topic_lane(topic)  # topic ‖ 0x00, as it follows the due time in a key

    def mine(key: bytes, value: bytes) -> bool:
        return key.startswith(target, 8) and not keys.is_internal_timer(key)

    found, resume = store.scan_where(CF.TIMERS, start, b"\xff" * 9, limit, LIST_SCAN_BUDGET, mine)
    return [message.decode_value(value) for _, value in found], resume


def push_groups(store: RocksStore) -> dict[tuple[str, str], PushSettings]:
    """Every (topic, group) with push delivery set, and its push settings: read once at
    start; the engine keeps it up to date as settings change."""
    found: dict[tuple[str, str], PushSettings] = {}
    start, end = keys.GROUP_SETTINGS, keys.prefix_end(keys.GROUP_SETTINGS)
    while page := store.scan(CF.META, start, end, SETTINGS_PAGE):
        for key, value in page:
            topic, group = keys.decode_group_key(key)
            if keys.is_internal(topic):
                continue  # stored before such settings were refused: nothing to push there
            push = decode_settings(value, f"{topic}/{group}").push
            if push is not None:
                found[topic, group] = push
        start = keys.successor(page[-1][0])
    return found


class DueAhead(NamedTuple):
    counts: list[int]  # scheduled messages due in each bucket, the first from ``now``
    capped: bool  # the scan stopped at its limit: later buckets may count short


def due_ahead(store: RocksStore, now_ms: int, bucket_ms: int, buckets: int, limit: int) -> DueAhead:
    """Messages due in each of ``buckets`` spans of ``bucket_ms`` from ``now_ms``, from at
    most ``limit`` timer keys (the engine's own timers are not counted): one bounded read,
    so an overview stays cheap with millions scheduled."""
    counts = [0] * buckets
    found = store.scan(
        CF.TIMERS, keys.due_bound(now_ms), keys.due_bound(now_ms + bucket_ms * buckets), limit
    )
    for key, _ in found:
        if not keys.is_internal_timer(key):
            counts[max(0, keys.read_u64(key) - now_ms) // bucket_ms] += 1
    return DueAhead(counts, len(found) >= limit)
