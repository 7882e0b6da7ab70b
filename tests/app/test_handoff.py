"""Which worker a connection's first request belongs to (app/cluster/handoff.py): the topic
read from the request target as the router reads it from the path, by the same hash."""

from __future__ import annotations

import urllib.parse
import zlib

import pytest

from app.cluster.handoff import owner_of
from app.cluster.layout import Layout

LAYOUT = Layout("/tmp/unused", partitions=8, workers=3)


def expected(topic: str) -> int:
    return LAYOUT.owner(zlib.crc32(topic.encode()) % 8)


@pytest.mark.parametrize(
    "topic", ["orders", "a", "t-1", "naïve", "with space", "slash%2Fin", "x" * 200]
)
def test_the_owner_is_the_topic_partitions_owner(topic: str) -> None:
    raw = urllib.parse.quote(topic, safe="").encode()
    decoded = urllib.parse.unquote(raw.decode())
    for target in (
        b"/v1/topics/" + raw,
        b"/v1/topics/" + raw + b"/messages",
        b"/v1/topics/" + raw + b"/messages/batch?x=1",
        b"/v1/topics/" + raw + b"/groups/g/receive",
    ):
        assert owner_of(target, LAYOUT) == expected(decoded), target


@pytest.mark.parametrize(
    "target",
    [
        b"/healthz",
        b"/v1/topics",
        b"/v1/topics/",
        b"/v1/topics?limit=3",
        b"/v1/topics//messages",
        b"/v1/topics/%25DLQ%25g/groups/r/receive",  # a group's dead letters: every partition
        b"/v1/topicsx/a/messages",
        b"/metrics",
        b"/ui/",
    ],
)
def test_no_owner_without_a_topic(target: bytes) -> None:
    assert owner_of(target, LAYOUT) is None
