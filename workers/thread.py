"""The lifecycle every background worker shares: one named daemon thread, a stop flag,
and the error that killed it (so /readyz tells the truth instead of going silent)."""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Callable


class OwnThread:
    """One named daemon thread: started, joined, and alive or not."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        self._thread = threading.Thread(target=target, name=name, daemon=True)
        self._thread.start()

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


class WorkerThread(OwnThread, abc.ABC):
    name = "rocktimer-worker"

    def __init__(self) -> None:
        super().__init__()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop() too, so a sleeping worker notices
        self.error: BaseException | None = None

    def start(self) -> None:
        self._stop.clear()
        self._spawn(self._main, self.name)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._join()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _main(self) -> None:
        try:
            self.run()
        except BaseException as exc:
            self.error = exc
            logging.getLogger(f"rocktimer.{self.name}").exception("%s stopped", self.name)

    @abc.abstractmethod
    def run(self) -> None:
        """The thread's loop; return when ``stopping``."""
