"""The lifecycle every background worker shares: one named daemon thread, a stop flag,
and the error that killed it (so /readyz tells the truth instead of going silent)."""

from __future__ import annotations

import abc
import logging
import threading


class WorkerThread(abc.ABC):
    name = "rocktimer-worker"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop() too, so a sleeping worker notices
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

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
