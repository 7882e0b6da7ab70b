"""Sealing a segment of the event log: its values decoded into one table and written as a
Parquet file (storage/event_table.py, workers/segments.py), in a child process.

Decoding (numpy) and compressing (zstd) cost ~0.7 µs an event. In the exporter's thread
that was the server's GIL: about a tenth of a durable batch send's CPU,
taken from the event loop and the writer. A child process has its own interpreter and,
on a machine of two cores or more, its own core; the exporter hands it a segment's raw
values through a pipe (a copy of ~100 bytes an event) and waits for the file.

The protocol on the child's stdin and stdout: frames of a u64 length and a pickle. A
request is ``(root, entries, day, first, last)``; the answer ``("ok", rows)`` or
``("error", text)``. The child reads until its stdin ends, so it ends with the server,
a SIGKILLed one included (finishing the file in hand: a hidden name of its own pid, which
only it renames, workers/segments.py). It ignores SIGINT and SIGTERM, which a terminal
or a container sends the whole process group: the server stops it by closing the pipe.

``ProcessSealer`` is the default; ``ThreadSealer`` (setting ``events_seal_process``
false) seals in the exporter's thread, as before, for a machine of one core.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import struct
import subprocess
import sys
from collections.abc import Callable
from typing import IO, Any, Protocol

from workers import gil

_LEN = struct.Struct("<Q")
STOP_WAIT_S = 10.0  # a child finishing a segment; then it is killed
NICE = 5  # the child yields a busy core to the server's own threads
DECODE_SLICE = 2_048  # events decoded at a time in the exporter's thread: numpy holds the
# GIL through each call, ~10 ms a call for a segment of 100k events at once (due timers
# up to 60 ms late while the exporter sealed); a slice's ~0.1 ms
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # for ``-m``


class Sealer(Protocol):
    def seal(
        self,
        root: str,
        entries: list[tuple[bytes, bytes]],
        day: str,
        first: int,
        last: int,
        partition: int = 0,
    ) -> int:
        """Write events ``first..last`` (the CF's ``entries``) of the data dir's
        ``partition`` as a segment; its rows."""

    def close(self) -> None: ...


def seal(
    root: str,
    entries: list[tuple[bytes, bytes]],
    day: str,
    first: int,
    last: int,
    give_way: Callable[[], None] | None = None,
    partition: int = 0,
) -> int:
    """Decode ``entries`` and write them as the segment of events ``first..last`` of
    ``partition``; ``give_way``: called between slices of the decoding (a thread beside
    the server)."""
    from storage.event_table import with_partition
    from workers import segments

    table = with_partition(decode(entries, give_way), partition)
    segments.write(root, table, day, first, last)
    return int(table.num_rows)


def decode(entries: list[tuple[bytes, bytes]], give_way: Callable[[], None] | None = None) -> Any:
    """The entries as one table; with ``give_way``, DECODE_SLICE events at a time with a
    call between (in a child process: all at once)."""
    import pyarrow as pa

    from storage import events
    from storage.event_table import decode as decode_all

    if give_way is None:
        return decode_all(entries)
    tables: list[pa.Table] = []
    start, rows = 0, 0
    for i, (_, value) in enumerate(entries):
        rows += events.count_and_time(value)[0]
        if rows >= DECODE_SLICE or i == len(entries) - 1:
            tables.append(decode_all(entries[start : i + 1]))
            start, rows = i + 1, 0
            give_way()
    return pa.concat_tables(tables) if tables else decode_all(entries)


class ThreadSealer:
    """Seals in the calling thread, giving way to due timers between slices."""

    def __init__(self, give_way: Callable[[], None] = gil.give_way) -> None:
        self.give_way = give_way

    def seal(
        self,
        root: str,
        entries: list[tuple[bytes, bytes]],
        day: str,
        first: int,
        last: int,
        partition: int = 0,
    ) -> int:
        return seal(root, entries, day, first, last, self.give_way, partition)

    def close(self) -> None:
        pass


class ProcessSealer:
    """Seals in one child process, started at the first segment and again after it dies."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0  # children started, in all

    def seal(
        self,
        root: str,
        entries: list[tuple[bytes, bytes]],
        day: str,
        first: int,
        last: int,
        partition: int = 0,
    ) -> int:
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
        stdin, stdout = proc.stdin, proc.stdout
        if stdin is None or stdout is None:  # never: both are pipes
            raise OSError("the sealer process has no pipes")
        try:
            _write(stdin, (root, entries, day, first, last, partition))
            status, value = _read(stdout)
        except (OSError, EOFError, pickle.UnpicklingError) as exc:
            self.close()
            raise OSError(f"the sealer process failed: {exc or type(exc).__name__}") from None
        if status != "ok":
            raise OSError(value)
        return int(value)

    def _start(self) -> subprocess.Popen[bytes]:
        self.close()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workers.sealer"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=ROOT,
        )
        self.started += 1
        return self.proc

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def close(self) -> None:
        """End the child: its stdin closed, it exits after the segment in hand."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):  # a dead child's: what it held is lost
                    pipe.close()
        try:
            proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _write(out: IO[bytes], message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_LEN.pack(len(data)))
    out.write(data)
    out.flush()


def _read(src: IO[bytes]) -> Any:
    head = src.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError("the pipe closed")
    size = _LEN.unpack(head)[0]
    data = src.read(size)
    if len(data) < size:
        raise EOFError("the pipe closed")
    return pickle.loads(data)


def serve(src: IO[bytes], out: IO[bytes]) -> None:
    """The child's loop: seal each request, answer, until ``src`` ends."""
    while True:
        try:
            root, entries, day, first, last, partition = _read(src)
        except EOFError:
            return
        try:
            sealed = seal(root, entries, day, first, last, partition=partition)
            answer: tuple[str, object] = ("ok", sealed)
        except Exception as exc:  # the exporter logs it and retries the segment
            answer = ("error", f"{type(exc).__name__}: {exc}")
        try:
            _write(out, answer)
        except BrokenPipeError:  # the server died meanwhile (a SIGKILL): nobody to tell
            with contextlib.suppress(OSError):  # nor for the exit's own flush of ``out``
                os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
            return


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.nice(NICE)
    serve(sys.stdin.buffer, sys.stdout.buffer)
