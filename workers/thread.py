"""The lifecycle every background worker shares: one named daemon thread, a stop flag,
and the error that killed it (so /readyz tells the truth instead of going silent, and
the server process exits: app/__main__.py)."""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Callable

from workers.clock import Clock


class OwnThread:
    """One named daemon thread: started, joined, alive or not, and what ended it."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._name = type(self).__name__  # the thread's, once spawned
        self.error: BaseException | None = None  # what ended the thread, if it raised

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        def main() -> None:
            try:
                target()
            except BaseException as exc:
                self.error = exc
                logging.getLogger(f"rocktimer.{name}").exception("%s stopped", name)

        self.error = None
        self._name = name
        self._thread = threading.Thread(target=main, name=name, daemon=True)
        self._thread.start()

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def death(self) -> str | None:
        """None while the thread runs; else which thread ended, and with what error."""
        if self.alive:
            return None
        return f"{self._name} ended" + (f": {self.error!r}" if self.error is not None else "")


class WorkerThread(OwnThread, abc.ABC):
    name = "rocktimer-worker"

    def __init__(self) -> None:
        super().__init__()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop() too, so a sleeping worker notices

    def start(self) -> None:
        self._stop.clear()
        self._spawn(self.run, self.name)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._join()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @abc.abstractmethod
    def run(self) -> None:
        """The thread's loop; return when ``stopping``."""


class Periodic(WorkerThread):
    """A worker that runs ``tick`` every ``interval_ms`` of its clock (the sweeper, the
    exporter). An error in ``expected`` is logged and the next tick tries again."""

    expected: tuple[type[Exception], ...] = ()

    def __init__(self, clock: Clock, interval_ms: int, *, at_start: bool = False) -> None:
        super().__init__()
        self.clock = clock
        self.interval_ms = interval_ms
        self._at_start = at_start  # the first tick at once, not one interval after start

    def run(self) -> None:
        due = self.clock.now_ms() + (0 if self._at_start else self.interval_ms)
        while not self.stopping:
            self.clock.wait(self._wake, due)
            # Clear the wake-up, or every later wait returns at once (FakeClock.advance sets
            # it to make waiters look at the clock again): a busy loop of ticks.
            self._wake.clear()
            if self.stopping:
                return
            if self.clock.now_ms() < due:
                continue
            due = self.clock.now_ms() + self.interval_ms
            try:
                self.tick()
            except self.expected as exc:
                logging.getLogger(f"rocktimer.{self.name}").warning("%s: %s", self.name, exc)

    @abc.abstractmethod
    def tick(self) -> None:
        """One round of the worker's work."""
