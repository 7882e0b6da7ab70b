"""The key codec shared by the two timers about one group's hold on messages
(invisible.py, retry.py): ``u64be(due) ‖ prefix group ‖ 0x00 ‖ topic ‖ 0x00 ‖ u64be(seq)
‖ u64be(generation)``. The value is empty for one message; an invisibility timer of a
lot (the first holds one receive made together, one generation) carries the lot's other
seqs, ``u64be`` each. The generation makes a stale timer harmless."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from storage import keys
from storage.errors import CorruptRecordError


class GroupTimer(NamedTuple):
    topic: str
    group: str
    seq: int
    generation: int


_SEQ_GEN = struct.Struct(">QQ")
SEQ_GEN_BYTES = _SEQ_GEN.size  # a key's tail after its due time, target and topic


def encode(prefix: str, due_ms: int, timer: GroupTimer) -> bytes:
    (key,) = encode_many(prefix, timer.topic, timer.group, [(due_ms, timer.seq, timer.generation)])
    return key


def encode_many(
    prefix: str, topic: str, group: str, held: Iterable[tuple[int, int, int]]
) -> list[bytes]:
    """``encode`` of each ``(due_ms, seq, generation)`` of one topic and group (a nack's
    lot): the same keys, the shared part built once."""
    # keys.timer_key's layout, its shared middle (target and the ident's topic) made once
    target = keys.timer_key(0, prefix + group, topic.encode() + keys.SEP)[8:]
    due, seq_gen = keys.u64, _SEQ_GEN.pack
    return [due(due_ms) + target + seq_gen(seq, gen) for due_ms, seq, gen in held]


def lot_value(seqs: Sequence[int]) -> bytes:
    """The value of a lot's timer: its seqs after the first (in the key)."""
    return struct.pack(f">{len(seqs)}Q", *seqs)


def lot_seqs(timer: GroupTimer, value: bytes) -> list[int]:
    """Every seq a timer is about: the key's, then the lot's others."""
    if len(value) % 8:
        raise CorruptRecordError(f"undecodable lot of a group timer: {len(value)} bytes")
    return [timer.seq, *struct.unpack(f">{len(value) // 8}Q", value)]


def decode(prefix: str, key: bytes) -> GroupTimer:
    timer = keys.decode_timer_key(key)
    try:
        sep = timer.ident.index(keys.SEP)
        return GroupTimer(
            timer.ident[:sep].decode(),
            timer.target[len(prefix) :],
            keys.read_u64(timer.ident, sep + 1),
            keys.read_u64(timer.ident, sep + 9),
        )
    except (ValueError, struct.error) as exc:
        raise CorruptRecordError(f"undecodable group timer {key!r}: {exc}") from exc
