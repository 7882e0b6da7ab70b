"""Tag filters (RocketMQ's tag expressions): ``*`` or tags joined by ``||``, spaces
ignored. A group with a filter receives only the messages whose tag it names.

Every tagged entry of a topic log is also in the tag index (storage/keys.py), written in
the batch that appends it and removed with it by retention. A filtered receive reads the
index of each tag it wants from the group's cursor: its work is what matches, however
many messages it passes over (they are ``filtered`` for the group: the cursor passes them
without a hold)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from storage import keys
from storage.records import record_tag
from storage.store import CF, RocksStore
from storage.txn import Txn

EXPRESSION = r"^\s*(\*|[^|\s*]+(\s*\|\|\s*[^|\s*]+)*)\s*$"  # the schema's; check() has words
MATCH_ALL = "*"
PARSED_CACHE = 1_024  # distinct expressions kept parsed (bounded)
TAG_MAX = 128  # characters in a tag (SendMessage, PutSchedule)
_PADDING = frozenset("\t\n\v\f\r")  # control characters that are whitespace: spaces here


def _control(text: str) -> str | None:
    """The first control character of ``text`` (the whitespace ones aside), if any."""
    for char in text:
        if (char < " " or "\x7f" <= char <= "\x9f") and char not in _PADDING:
            return char
    return None


def tag_problem(tag: str) -> str | None:
    """What keeps a filter from naming ``tag`` (one would receive it only with ``*``), in
    words; None if a filter can name it."""
    bad = _control(tag)
    if bad is not None:
        return f"holds the control character U+{ord(bad):04X}"
    if any(char.isspace() for char in tag):
        return "holds a space: a tag filter could never name it"
    if "|" in tag or "*" in tag:
        return "holds '|' or '*', which a tag filter uses: it could never name it"
    return None


def check(expression: str) -> str:
    """``expression`` if it is a filter some message can match; ValueError saying what is
    wrong otherwise (a filter that can never match would pass every message over)."""
    if not expression.strip():
        raise ValueError("is empty: '*' (every message) or tags joined by '||'")
    bad = _control(expression)
    if bad is not None:
        raise ValueError(f"holds the control character U+{ord(bad):04X}: no tag can hold one")
    if expression.strip() == MATCH_ALL:
        return expression
    for part in expression.split("||"):
        tag = part.strip()
        if not tag:
            raise ValueError("has an empty tag: tags are joined by '||', e.g. 'TagA || TagB'")
        if tag == MATCH_ALL or "*" in tag:
            raise ValueError("uses '*' beside tags: '*' alone stands for every message")
        if "|" in tag:
            raise ValueError(f"has a single '|' in {tag!r}: tags are joined by '||'")
        if any(char.isspace() for char in tag):
            raise ValueError(f"has a space inside {tag!r}: a tag holds none; join tags with '||'")
        if len(tag) > TAG_MAX:
            raise ValueError(f"names a tag over {TAG_MAX} characters: no message can carry it")
    return expression


@functools.lru_cache(maxsize=PARSED_CACHE)
def tags(expression: str) -> frozenset[str] | None:
    """The tags an expression names; None for ``*`` (every message, tagged or not)."""
    if expression.strip() == MATCH_ALL:
        return None
    return frozenset(t.strip() for t in expression.split("||"))


def index(txn: Txn, topic: str, record: bytes, seq: int) -> None:
    """Index a topic-log entry by its tag, if it has one (whoever appends to a topic log).
    Each entry's value is its number among the topic's entries of that tag (a counter kept
    like a lane's seq, under the tag's prefix): what a filtered group has not received is
    then two reads a tag (``unread``), not a count."""
    tag = record_tag(record)
    if tag is not None:
        prefix = keys.tag_prefix(topic, tag)
        txn.put(CF.LOGS, prefix + keys.u64(seq), keys.u64(txn.claim_seq(prefix)))


LEGACY_COUNT_MAX = 100_000  # index entries counted at most where they carry no number


def unread(store: RocksStore, topic: str, wanted: frozenset[str], position: int) -> int:
    """How many entries of ``topic``'s log from seq ``position`` on carry a wanted tag: a
    filtered group's backlog (it receives nothing else). Per tag, the first index entry
    from there and the tag's counter: the entries from that one to the last."""
    total = 0
    for tag in wanted:
        prefix = keys.tag_prefix(topic, tag)
        start, end = prefix + keys.u64(position), prefix + keys.TAG_KEY_END
        first = store.scan(CF.LOGS, start, end, 1)
        if not first:
            continue
        number = first[0][1]
        if len(number) == 8:
            counter = store.get(CF.META, keys.next_seq_key(prefix))
            total += max(0, (keys.read_u64(counter) if counter else 0) - keys.read_u64(number))
        else:  # indexed before entries were numbered: counted (bounded)
            total += len(store.scan(CF.LOGS, start, end, LEGACY_COUNT_MAX))
    return total


def counters_prefix(topic: str) -> bytes:
    """What the meta keys of every tag counter of ``topic`` start with (they go with its
    log when retention empties it)."""
    return keys.next_seq_key((keys.TAG_PREFIX + topic).encode() + keys.SEP)


def unindex(txn: Txn, topic: str, record: bytes, seq: int) -> None:
    tag = record_tag(record)
    if tag is not None:
        txn.delete(CF.LOGS, keys.tag_key(topic, tag, seq))


def read(
    txn: Txn,
    topic: str,
    group: str,
    wanted: frozenset[str],
    limit: int,
    fits: Callable[[bytes], bool],
) -> list[tuple[bytes, bytes]]:
    """The next ``limit`` entries of the topic log after the group's cursor whose tag is
    wanted; advances the cursor past them and past everything before them that is not.
    ``fits(value)``: stop before the first entry it refuses (as lanes.read)."""
    if limit <= 0:
        return []
    lane = keys.topic_lane(topic)
    cursor_key = keys.cursor_key(lane, group)
    raw = txn.get(CF.META, cursor_key)
    cursor = keys.read_u64(raw) if raw else 0
    seqs: set[int] = set()
    exhausted = True  # every wanted tag's index read to its end
    for tag in wanted:
        prefix = keys.tag_prefix(topic, tag)
        found = txn.scan(CF.LOGS, prefix + keys.u64(cursor), prefix + keys.TAG_KEY_END, limit)
        seqs.update(keys.log_seq(k) for k, _ in found)
        exhausted = exhausted and len(found) < limit
    chosen = sorted(seqs)[:limit]
    exhausted = exhausted and len(chosen) == len(seqs)
    out: list[tuple[bytes, bytes]] = []
    for seq in chosen:
        key = keys.log_key(lane, seq)
        value = txn.get(CF.LOGS, key)
        if value is not None and record_tag(value) in wanted:  # else: swept, or a collision
            if not fits(value):
                exhausted = False
                break
            out.append((key, value))
        cursor = seq + 1
    if exhausted:  # nothing matches before the end of what is committed: pass it all
        committed = txn.store.get(CF.META, keys.next_seq_key(lane))
        cursor = max(cursor, keys.read_u64(committed) if committed else 0)
    txn.put(CF.META, cursor_key, keys.u64(cursor))  # made at the first read, as lanes.read
    return out
