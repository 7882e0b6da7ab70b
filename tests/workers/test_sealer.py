"""The sealer's child process (workers/sealer.py), for real: it writes what the exporter's
thread writes, comes back after it dies, and answers an error with its reason."""

from __future__ import annotations

import os
import pickle
import signal
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from storage import keys
from storage.events import EventKind, Staged
from storage.records import MessageRecord, encode_message
from workers import segments
from workers.sealer import ProcessSealer, ThreadSealer

DAY = "2026-11-26"


def entries(first: int, n: int) -> list[tuple[bytes, bytes]]:
    """``n`` events from seq ``first``, as two values of the events CF."""
    out: list[tuple[bytes, bytes]] = []
    seq = first
    for part in (n // 2, n - n // 2):
        staged = Staged()
        for i in range(part):
            rec = MessageRecord("t", f"m{seq + i}", 1_000 + i, 500, b"body", tag="red")
            staged.add(EventKind.SCHEDULED, encode_message(rec))
        out.append((keys.event_key(seq), staged.encode(2_000)))
        seq += part
    return out


@pytest.fixture
def child() -> Iterator[ProcessSealer]:
    sealer = ProcessSealer()
    yield sealer
    sealer.close()


def test_the_child_writes_what_the_thread_writes(tmp_path: Path, child: ProcessSealer) -> None:
    batch = entries(0, 50)
    assert child.seal(str(tmp_path / "a"), batch, DAY, 0, 49) == 50
    assert ThreadSealer(lambda: None).seal(str(tmp_path / "b"), batch, DAY, 0, 49) == 50
    (a,) = segments.segments(str(tmp_path / "a"))
    (b,) = segments.segments(str(tmp_path / "b"))
    assert os.path.basename(a.path) == os.path.basename(b.path) == "part-0-49.parquet"
    assert pq.read_table(a.path).to_pylist() == pq.read_table(b.path).to_pylist()
    assert child.pid is not None
    assert child.pid != os.getpid()


def test_a_segment_carries_its_partition(tmp_path: Path, child: ProcessSealer) -> None:
    """Every row of a segment has the partition it was sealed for (0 by default: a data
    dir of one partition), from the child and from the thread alike."""
    batch = entries(0, 10)
    assert child.seal(str(tmp_path / "a"), batch, DAY, 0, 9, 3) == 10
    assert ThreadSealer(lambda: None).seal(str(tmp_path / "b"), batch, DAY, 0, 9, 3) == 10
    assert ThreadSealer(lambda: None).seal(str(tmp_path / "c"), batch, DAY, 0, 9) == 10
    for root, k in (("a", 3), ("b", 3), ("c", 0)):
        (segment,) = segments.segments(str(tmp_path / root))
        table = pq.read_table(segment.path)
        assert table.schema.field("partition").type == "int32"
        assert not table.schema.field("partition").nullable
        assert table.column("partition").to_pylist() == [k] * 10
        assert table.column("seq").to_pylist() == list(range(10))


def test_a_dead_child_is_replaced_at_the_next_segment(tmp_path: Path, child: ProcessSealer) -> None:
    root = str(tmp_path)
    assert child.seal(root, entries(0, 10), DAY, 0, 9) == 10
    assert child.proc is not None
    child.proc.send_signal(signal.SIGKILL)
    child.proc.wait()
    assert child.seal(root, entries(10, 10), DAY, 10, 19) == 10
    assert child.started == 2
    assert [(s.first, s.last) for s in segments.segments(root)] == [(0, 9), (10, 19)]


def test_a_child_killed_mid_request_is_an_oserror_and_the_next_seal_works(
    tmp_path: Path, child: ProcessSealer, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path)
    assert child.seal(root, entries(0, 4), DAY, 0, 3) == 4
    assert child.proc is not None
    dead = child.proc
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    # As if it died after the exporter looked: the request itself fails.
    monkeypatch.setattr(dead, "poll", lambda: None)
    with pytest.raises(OSError, match="the sealer process failed"):
        child.seal(root, entries(4, 4), DAY, 4, 7)
    assert child.proc is None  # closed: the next seal starts another
    assert child.seal(root, entries(4, 4), DAY, 4, 7) == 4


def test_an_error_in_the_child_comes_back_with_its_reason(
    tmp_path: Path, child: ProcessSealer
) -> None:
    blocked = tmp_path / "events"
    blocked.write_text("a file where the events directory goes")
    with pytest.raises(OSError, match=r"FileExistsError|NotADirectoryError"):
        child.seal(str(blocked), entries(0, 4), DAY, 0, 3)
    pid = child.pid
    assert child.seal(str(tmp_path / "ok"), entries(0, 4), DAY, 0, 3) == 4
    assert child.pid == pid, "an error in a seal does not end the child"


def test_closing_ends_the_child(child: ProcessSealer, tmp_path: Path) -> None:
    child.seal(str(tmp_path), entries(0, 2), DAY, 0, 1)
    proc = child.proc
    assert proc is not None
    child.close()
    assert proc.returncode == 0
    assert child.proc is None


def test_a_server_sealing_in_a_child_never_imports_pyarrow(tmp_path: Path) -> None:
    """~50 MiB of the server's RSS that only the sealer needs."""
    script = f"""
import asyncio, sys, time
from storage.records import MessageRecord
from workers.engine import Engine, EngineConfig
engine = Engine(EngineConfig(data_dir={str(tmp_path / "data")!r}, events_seal_ms=3_600_000))
engine.start()
try:
    # The exporter's thread exports once at start; the next round is an hour away. Calling
    # export() while that first round ran shared the sealer's pipe between two threads.
    deadline = time.monotonic() + 60
    while engine.exporter.rounds < 1:
        assert time.monotonic() < deadline, "the exporter's first round never ended"
        time.sleep(0.01)
    now = engine.clock.now_ms()
    asyncio.run(engine.send(MessageRecord("t", "m", now + 60_000, now, b"x")))
    assert engine.exporter.export() == 1
    engine.exporter.expire()
finally:
    engine.stop()
assert "pyarrow" not in sys.modules, "pyarrow imported"
assert "numpy" not in sys.modules, "numpy imported"
"""
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert len(segments.segments(str(tmp_path / "data" / "events"))) == 1


def test_the_child_ends_quietly_when_the_server_died_before_its_answer(tmp_path: Path) -> None:
    """A SIGKILLed server leaves its sealer child an answer to write into a closed pipe:
    the child ends as it would at the end of its input, saying nothing (its stderr is the
    server's log, where a traceback is an error)."""
    child = subprocess.Popen(
        [sys.executable, "-m", "workers.sealer"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    assert child.stderr is not None
    child.stdout.close()  # the server is gone: nobody reads the answer
    request = pickle.dumps((str(tmp_path), [], "2026-01-01", 1, 0, 0))
    child.stdin.write(struct.pack("<Q", len(request)) + request)
    child.stdin.close()
    with child.stderr:
        err = child.stderr.read()
    assert child.wait(timeout=60) == 0
    assert err == b""
