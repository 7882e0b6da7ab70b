"""The batch send route's answers, item by item, for what a bulk load sends: client msg_ids
repeated within a batch and across batches, ids sent before or cancelled, messages due now
between messages due later, and tags and msg_ids at the edges of what the schema takes
(app/schemas.py: PlainSendMessage reads a batch first, SendMessage when it refuses)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from app.schemas import PlainSendMessage, SendMessage
from workers.clock import FakeClock

NOW = 1_700_000_000_000
MINUTE = 60_000


def _item(msg_id: str, due_ms: int, **extra: Any) -> dict[str, Any]:
    return {"msg_id": msg_id, "body": f"body of {msg_id}", "deliver_at_ms": due_ms, **extra}


def test_repeats_within_and_across_batches_keep_their_answers(live: Callable[..., Any]) -> None:
    """A repeat answers 200 with its first send's state and deliver time, wherever the first
    send was (earlier in the batch, in an earlier batch, due now or later); a cancelled id
    answers 409; everything else is created once."""
    clock = FakeClock(NOW)
    with live(clock=clock) as app, httpx.Client(base_url=app.url) as c:
        url = "/v1/topics/t/messages/batch"
        assert c.post("/v1/topics/t/messages", json=_item("gone", NOW + MINUTE)).status_code == 201
        assert c.delete("/v1/topics/t/messages/gone").status_code == 200
        first = [
            _item("a", NOW + 5 * MINUTE, tag="email"),
            _item("b", NOW + 3 * MINUTE, properties={"source": "import"}),
            _item("a", NOW + 9 * MINUTE, tag="sms"),  # a repeat: the first send's answer
            _item("now", NOW),  # due now: delivered at once
            _item("now", NOW + MINUTE),
            _item("gone", NOW + MINUTE),
            _item("c", NOW + 7 * MINUTE),
            _item("b", NOW),
            {"body": "no id", "delay_ms": MINUTE},
        ]
        r = c.post(url, json={"messages": first})
        assert r.status_code == 200, r.text
        got = [(x["status"], x.get("state"), x.get("deliver_at_ms")) for x in r.json()["results"]]
        assert got == [
            (201, "scheduled", NOW + 5 * MINUTE),
            (201, "scheduled", NOW + 3 * MINUTE),
            (200, "scheduled", NOW + 5 * MINUTE),
            (201, "delivered", NOW),
            (200, "delivered", NOW),
            (409, None, None),
            (201, "scheduled", NOW + 7 * MINUTE),
            (200, "scheduled", NOW + 3 * MINUTE),
            (201, "scheduled", NOW + MINUTE),
        ]
        assert "cancelled" in r.json()["results"][5]["error"]
        ids = [x.get("msg_id") for x in r.json()["results"]]
        assert ids[:5] + ids[6:8] == ["a", "b", "a", "now", "now", "c", "b"]

        second = [
            _item("c", NOW + MINUTE),
            _item("d", NOW + 2 * MINUTE),
            _item("a", NOW),
            _item("d", NOW + 4 * MINUTE),
            _item("now", NOW + MINUTE),
        ]
        r = c.post(url, json={"messages": second})
        got = [(x["status"], x.get("state"), x.get("deliver_at_ms")) for x in r.json()["results"]]
        assert got == [
            (200, "scheduled", NOW + 7 * MINUTE),
            (201, "scheduled", NOW + 2 * MINUTE),
            (200, "scheduled", NOW + 5 * MINUTE),
            (200, "scheduled", NOW + 2 * MINUTE),
            (200, "delivered", NOW),
        ]
        a = c.get("/v1/topics/t/messages/a").json()
        assert (a["tag"], a["deliver_at_ms"]) == ("email", NOW + 5 * MINUTE)
        assert c.get("/v1/topics/t/messages/b").json()["properties"] == {"source": "import"}
        scheduled = c.get("/v1/topics/t/messages", params={"state": "scheduled"}).json()
        assert len(scheduled["items"]) == 5  # a, b, c, d and the server-named one


def test_tags_and_ids_at_the_schemas_edges_get_its_answers(live: Callable[..., Any]) -> None:
    """Tags outside printable ASCII are still taken (SendMessage reads the batch again), and
    each refused item names its field and reason, the others stored."""
    with live(clock=FakeClock(NOW)) as app, httpx.Client(base_url=app.url) as c:
        items = [
            _item("x1", NOW + MINUTE, tag="café"),
            _item("...", NOW + MINUTE),
            _item(".x", NOW + MINUTE, tag="a~b!"),
            _item("..", NOW + MINUTE),
            _item("x2", NOW + MINUTE, tag="a b"),
            _item("x3", NOW + MINUTE, tag="日本"),
        ]
        r = c.post("/v1/topics/t/messages/batch", json={"messages": items})
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert [x["status"] for x in results] == [201, 201, 201, 422, 422, 201]
        assert results[3]["error"].startswith("messages.3.msg_id: ")
        assert "addressed" in results[3]["error"]
        assert results[4]["error"].startswith("messages.4.tag: ")
        assert "space" in results[4]["error"]
        assert c.get("/v1/topics/t/messages/x1").json()["tag"] == "café"
        assert c.get("/v1/topics/t/messages/x3").json()["tag"] == "日本"


def _verdict(model: type[SendMessage], item: dict[str, Any]) -> dict[str, Any] | None:
    """What ``model`` reads ``item`` as (its fields), None if it refuses it."""
    try:
        return model.model_validate(item, strict=True).model_dump()
    except ValidationError:
        return None


ID_CHARS = st.sampled_from("abZ09._:-/~!* é")


EDGE_IDS = [".", "..", "...", ".a", "a" * 128, "a" * 129, "." + "a" * 127, ".." + "a" * 126]
EDGE_IDS += ["..." + "a" * 126, "." * 128, "." * 129]


@given(msg_id=st.text(ID_CHARS, max_size=130) | st.sampled_from(EDGE_IDS))
def test_the_plain_msg_id_is_exactly_the_schemas(msg_id: str) -> None:
    item = {"msg_id": msg_id, "body": "x"}
    assert _verdict(PlainSendMessage, item) == _verdict(SendMessage, item)


@given(tag=st.text(max_size=130) | st.text(st.characters(max_codepoint=0x7F), max_size=130))
def test_the_plain_tag_takes_only_what_the_schema_takes(tag: str) -> None:
    item = {"body": "x", "tag": tag}
    plain = _verdict(PlainSendMessage, item)
    if plain is not None:
        assert plain == _verdict(SendMessage, item)
    common = tag.isascii() and tag.isprintable() and 1 <= len(tag) <= 128
    if common and not {" ", "|", "*"} & set(tag):
        assert plain is not None  # the common tag is read in Rust alone
