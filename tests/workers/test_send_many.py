"""A batch send staged as columns (workers/ops/messages.py, ``_stage_new``) writes exactly
what the same batch sent one message at a time writes: keys, values, counts, events and
outcomes, whatever the batch holds (ids twice, ids already sent or cancelled, items
refused before, messages due now, a record that cannot be encoded)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from storage.event_table import decode
from storage.events import EventKind
from storage.keys import message_key
from storage.records import MessageRecord, MessageState, decode_message, encode_message
from storage.store import CF, RocksStore
from storage.txn import Txn
from workers.ops import events, messages

NOW = 1_700_000_000_000
END = b"\xff" * 64
TOPICS = ("t", "u")


UNENCODABLE = {"k": cast(str, object())}  # no record holds it: it fails the column alone


def _record(
    topic: str, msg_id: str, delay_ms: int, tag: str | None, broken: bool = False
) -> MessageRecord:
    body = b"body " + msg_id.encode()
    properties = UNENCODABLE if broken else {}
    return MessageRecord(topic, msg_id, NOW + delay_ms, NOW, body, tag=tag, properties=properties)


items = st.one_of(
    st.none(),
    st.builds(
        _record,
        st.sampled_from(TOPICS),
        st.sampled_from([f"m{i}" for i in range(12)]),
        st.sampled_from([-5, 0, 1, 60_000]),
        st.sampled_from([None, "red"]),
        st.sampled_from([False] * 7 + [True]),
    ),
)
# ids sent before the batch, some cancelled since (their msg_id stays dead)
earlier = st.dictionaries(st.sampled_from(["m0", "m1", "m2"]), st.booleans())


class Stores:
    def __init__(self, root: str) -> None:
        self.bulk = RocksStore(f"{root}/bulk")
        self.each = RocksStore(f"{root}/each")

    def close(self) -> None:
        self.bulk.close()
        self.each.close()


@pytest.fixture
def stores() -> Iterator[Stores]:
    with tempfile.TemporaryDirectory() as root:
        pair = Stores(root)
        try:
            yield pair
        finally:
            pair.close()


def one_at_a_time(
    txn: Txn, batch: list[MessageRecord | None], fresh: list[bool]
) -> list[messages.SendOutcome | Exception | None]:
    """The batch as single sends, each under its own savepoint."""
    out: list[messages.SendOutcome | Exception | None] = []
    for rec, new in zip(batch, fresh, strict=True):
        if rec is None:
            out.append(None)
            continue
        point = txn.savepoint()
        try:
            out.append(_single(txn, rec, new))
        except Exception as exc:
            txn.rollback(point)
            out.append(exc)
    return out


def _single(txn: Txn, rec: MessageRecord, new: bool) -> messages.SendOutcome:
    """One send as ``messages.send`` makes it, but a new message due now as the one-message
    delivery (``messages.deliver``, the topic log's own) puts it, after its scheduled event."""
    known = None if new else txn.get(CF.MESSAGES, message_key(rec.topic, rec.msg_id))
    if known is not None or rec.deliver_at_ms > txn.now_ms:
        return messages.send(txn, rec, fresh_id=new)
    events.emit(txn, EventKind.SCHEDULED, encode_message(rec))
    messages.deliver(txn, rec)
    txn.sync = True
    return messages.SendOutcome(
        True, rec.topic, rec.msg_id, MessageState.DELIVERED, rec.deliver_at_ms, rec.created_at_ms
    )


def _send(
    store: RocksStore,
    batch: list[MessageRecord | None],
    fresh: list[bool],
    before: dict[str, bool],
    op: Any = messages.send_many,
) -> tuple[list[Any], dict[str, list[tuple[bytes, bytes]]], list[dict[str, Any]]]:
    txn = Txn(store, NOW - 10)
    for msg_id, cancelled in before.items():
        messages.send(txn, _record("t", msg_id, 60_000, None))
        if cancelled:
            messages.cancel(txn, "t", msg_id)
    txn.commit(0)
    txn = Txn(store, NOW)
    out = op(txn, batch, fresh)
    txn.commit(txn.pending_delta)
    written = {cf: store.scan(cf, b"", END, 10**6) for cf in CF.ALL if cf != CF.EVENTS}
    events = decode(store.scan(CF.EVENTS, b"", END, 10**6)).to_pylist()
    return [o if not isinstance(o, Exception) else repr(o) for o in out], written, events


@pytest.mark.slow  # 60 examples, each two engines' writes: ~25 s on two cores
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=st.lists(items, min_size=1, max_size=12), before=earlier)
# An id whose first copy cannot be encoded, repeated later in the batch among messages due
# later and due now: the repeat is sent as new, in its place.
@example(
    batch=[
        _record("t", "m1", 60_000, None, True),
        _record("t", "m2", 1, None),
        _record("t", "m1", 60_000, "red"),
    ],
    before={},
)
@example(
    batch=[
        _record("t", "m1", 60_000, None, True),
        _record("t", "m2", 0, None),
        _record("t", "m1", 60_000, "red"),
        _record("t", "m3", 1, None),
    ],
    before={"m0": False},
)
def test_columns_write_what_one_at_a_time_writes(
    batch: list[MessageRecord | None], before: dict[str, bool]
) -> None:
    fresh = [False] * len(batch)  # every id the client's: looked up
    with tempfile.TemporaryDirectory() as root:
        pair = Stores(root)
        try:
            bulk = _send(pair.bulk, batch, fresh, before)
            each = _send(pair.each, batch, fresh, before, one_at_a_time)
        finally:
            pair.close()
    assert bulk[0] == each[0]  # outcomes
    assert bulk[1] == each[1]  # every key of every CF but the events
    assert bulk[2] == each[2]  # the events, decoded


def test_a_plain_batch_takes_the_columns(stores: Stores, monkeypatch: pytest.MonkeyPatch) -> None:
    """The common batch (new ids, due later; an item refused before is a None) is staged as
    columns, once; an id twice in the batch sends the second one alone."""
    calls: list[int] = []
    real = messages._stage_new

    def counted(txn: Txn, recs: list[MessageRecord], index_keys: list[bytes]) -> Any:
        calls.append(len(recs))
        return real(txn, recs, index_keys)

    monkeypatch.setattr(messages, "_stage_new", counted)
    batch: list[MessageRecord | None] = [_record("t", f"n{i}", 60_000, None) for i in range(1000)]
    batch[7] = None
    out = messages.send_many(Txn(stores.bulk, NOW), batch, [True] * 1000)
    assert calls == [999]
    assert out[7] is None
    assert all(isinstance(o, messages.SendOutcome) and o.created for o in out[:7] + out[8:])

    calls.clear()
    twice = [_record("t", "x", 60_000, None), _record("t", "x", 60_000, None)]
    out = messages.send_many(Txn(stores.bulk, NOW), twice)
    assert calls == [1]  # the first staged, the second found it staged
    assert [o.created for o in out if isinstance(o, messages.SendOutcome)] == [True, False]


def test_odd_items_keep_the_batch_one_column(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An id twice, an id sent before (a bulk load's repeated rows, a rerun) and messages
    already due (a file loaded after its first times passed) keep the batch one column:
    the repeat is answered from what the column staged, the id sent before from its
    entry, and the messages due now go into the topic log in the batch's order. Every
    outcome keeps its place in the batch."""
    calls: list[int] = []
    real = messages._stage_new

    def counted(txn: Txn, recs: list[MessageRecord], index_keys: list[bytes]) -> Any:
        calls.append(len(recs))
        return real(txn, recs, index_keys)

    txn = Txn(stores.bulk, NOW - 10)
    messages.send(txn, _record("t", "n500", 60_000, None))
    txn.commit(txn.pending_delta)
    monkeypatch.setattr(messages, "_stage_new", counted)
    due = set(range(0, 1000, 3))  # a third of the batch, item 600 among them
    batch: list[MessageRecord | None] = [
        _record("t", f"n{i}", 0 if i in due else 60_000, None) for i in range(1000)
    ]
    batch[7] = None  # refused before
    batch[300] = _record("t", "n10", 60_000, None)  # the id of item 10
    batch[700] = _record("t", "n600", 60_000, None)  # the id of item 600, due now
    txn = Txn(stores.bulk, NOW)
    out = messages.send_many(txn, batch, [False] * 1000)
    assert calls == [996]  # one column: all but the None, the two repeats and n500
    txn.commit(txn.pending_delta)
    assert out[7] is None
    sent = [o for o in out if isinstance(o, messages.SendOutcome)]
    assert len(sent) == 999
    assert [o.msg_id for o in sent] == [r.msg_id for r in batch if r is not None]
    created = {o.msg_id for o in sent if o.created}
    assert created == {f"n{i}" for i in range(1000)} - {"n7", "n300", "n500", "n700"}
    for first, repeat in ((out[10], out[300]), (out[600], out[700])):
        assert isinstance(first, messages.SendOutcome)
        assert repeat == first._replace(created=False)
    states = [o.state for o in out[599:602] if isinstance(o, messages.SendOutcome)]
    assert states == [MessageState.SCHEDULED, MessageState.DELIVERED, MessageState.SCHEDULED]
    log = [decode_message(v).msg_id for _, v in stores.bulk.scan(CF.LOGS, b"t\x00", END, 10**6)]
    assert log == [f"n{i}" for i in sorted(due - {300})]  # the topic log: the batch's order
