"""The changelog's records: a partition's group commits, as bytes, and back.

A commit is what one ``RocksStore.write_staged`` call wrote: its range deletes, then its
final values per column family (None = delete). Every write in a commit is blind (no read
of the store), so replaying commits that a copy already holds, in order, leaves it as it
was: a standby may apply a record twice.

A record is one of:
- ``C`` + commits: one or more commits, in commit order;
- ``P`` + part: a part of commits too large for one message; the parts that follow up to
  and including an ``L`` record make one ``C`` body (a reader drops an unfinished run
  when a fence comes: its writer was deposed between parts);
- ``F`` + u32 length + JSON ``{"fence": node, "epoch": n}`` + commits: a new owner's first
  record, with the writes it starts the partition with (the receipt secret, once).
"""

from __future__ import annotations

import json
import struct
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from storage.errors import CorruptRecordError
from storage.store import CF, DeleteRange

COMMITS = b"C"
PART = b"P"
LAST_PART = b"L"
FENCE = b"F"

Staged = dict[str, dict[bytes, bytes | None]]
Commit = tuple[Sequence[DeleteRange], Staged]

_CF_INDEX = {cf: i for i, cf in enumerate(CF.ALL)}
_HEAD = struct.Struct("<III")  # ranges, column families with writes, bytes of this commit
_RANGE = struct.Struct("<BII")  # cf, len(begin), len(end)
_CF = struct.Struct("<BI")  # cf, entries
_U32 = struct.Struct("<I")
_DELETED = -1  # a value length: the key is deleted
if array("I").itemsize != 4 or array("i").itemsize != 4:  # pragma: no cover - every Linux
    raise ImportError("the changelog codec needs 4-byte C ints")


def _encode_commit(ranges: Sequence[DeleteRange], staged: Staged) -> list[bytes]:
    parts: list[bytes] = []
    cfs = 0
    for r in ranges:
        parts += (_RANGE.pack(_CF_INDEX[r.cf], len(r.begin), len(r.end)), r.begin, r.end)
    for cf, values in staged.items():
        if not values:
            continue
        cfs += 1
        keys = list(values)
        vals = list(values.values())
        parts.append(_CF.pack(_CF_INDEX[cf], len(keys)))
        parts.append(array("I", map(len, keys)).tobytes())
        parts.append(array("i", [_DELETED if v is None else len(v) for v in vals]).tobytes())
        parts.append(b"".join(keys))
        parts.append(b"".join([v for v in vals if v is not None]))
    size = sum(map(len, parts))
    return [_HEAD.pack(len(ranges), cfs, size), *parts]


def encode_commits(commits: Sequence[Commit]) -> bytes:
    """The body of a ``C`` record (or of a fence's writes)."""
    out: list[bytes] = []
    for ranges, staged in commits:
        out += _encode_commit(ranges, staged)
    return b"".join(out)


def decode_commits(body: bytes | memoryview) -> Iterator[Commit]:
    """The commits of a ``C`` body, in order; CorruptRecordError if it is not one."""
    view = memoryview(body)
    at = 0
    try:
        while at < len(view):
            n_ranges, n_cfs, size = _HEAD.unpack_from(view, at)
            at += _HEAD.size
            end_of_commit = at + size
            if end_of_commit > len(view):
                raise CorruptRecordError("changelog commit runs past its record")
            ranges: list[DeleteRange] = []
            for _ in range(n_ranges):
                cf, lb, le = _RANGE.unpack_from(view, at)
                at += _RANGE.size
                begin = bytes(view[at : at + lb])
                end = bytes(view[at + lb : at + lb + le])
                at += lb + le
                ranges.append(DeleteRange(CF.ALL[cf], begin, end))
            staged: Staged = {}
            for _ in range(n_cfs):
                cf, n = _CF.unpack_from(view, at)
                at += _CF.size
                klens = array("I")
                klens.frombytes(view[at : at + 4 * n])
                at += 4 * n
                vlens = array("i")
                vlens.frombytes(view[at : at + 4 * n])
                at += 4 * n
                values: dict[bytes, bytes | None] = {}
                kat = at
                vat = at + sum(klens)
                for klen, vlen in zip(klens, vlens, strict=True):
                    key = bytes(view[kat : kat + klen])
                    kat += klen
                    if vlen == _DELETED:
                        values[key] = None
                    else:
                        values[key] = bytes(view[vat : vat + vlen])
                        vat += vlen
                at = vat
                staged[CF.ALL[cf]] = values
            if at != end_of_commit:
                raise CorruptRecordError("changelog commit has a wrong length")
            yield ranges, staged
    except (struct.error, IndexError, ValueError) as exc:
        raise CorruptRecordError(f"changelog record cannot be decoded: {exc}") from exc


def fence_record(node: str, epoch: int, commits: Sequence[Commit]) -> bytes:
    head = json.dumps({"fence": node, "epoch": epoch}).encode()
    return FENCE + _U32.pack(len(head)) + head + encode_commits(commits)


@dataclass(slots=True)
class Fence:
    node: str
    epoch: int
    body: memoryview = field(repr=False)  # its commits


def decode_fence(record: bytes) -> Fence:
    try:
        (n,) = _U32.unpack_from(record, 1)
        head = json.loads(record[5 : 5 + n])
        return Fence(str(head["fence"]), int(head["epoch"]), memoryview(record)[5 + n :])
    except (struct.error, ValueError, KeyError, TypeError) as exc:
        raise CorruptRecordError(f"changelog fence cannot be decoded: {exc}") from exc


def split(body: bytes, max_bytes: int) -> list[bytes]:
    """The records that carry ``body``: one ``C`` record, or ``P``... ``L`` parts of at
    most ``max_bytes`` each."""
    if len(body) + 1 <= max_bytes:
        return [COMMITS + body]
    step = max_bytes - 1
    chunks = [body[i : i + step] for i in range(0, len(body), step)]
    return [PART + c for c in chunks[:-1]] + [LAST_PART + chunks[-1]]
