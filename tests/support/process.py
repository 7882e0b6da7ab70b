"""Server processes for the bench and the tests: the real service or the bare app, on a
random free port (tests/support/server.py is this module's ServerProcess with test defaults).

Every figure starts its own server as a child process (on a fresh temp data dir for the
service), waits until it answers, samples its memory and CPU from /proc, and stops it by
its PID: SIGTERM, then SIGKILL if it does not exit in time.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from bench.bare_app import ROUTE

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0  # a cold RocksDB open plus imports takes ~1 s; be generous on CI
STOP_TIMEOUT_S = 40.0  # the service waits up to 35 s for long polls on a graceful stop
READY_POLL_S = 0.05
RSS_SAMPLE_S = 0.05  # the brief: VmRSS every 50 ms
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # /proc/<pid>/stat's unit
_CPUCLOCK_SCHED = 2  # Linux: a process's CPU-time clock id is (~pid << 3) | CPUCLOCK_SCHED
PYSPY_RATE_HZ = 100  # py-spy's default rate; --nonblocking keeps the server running between
FREE_PORT_TRIES = 1000
PYSPY_STOP_S = 30.0  # py-spy writes its file on SIGINT; wait that long for it


_HANDED_OUT: set[int] = set()  # every port free_port() returned in this process
_HANDED_OUT_LOCK = threading.Lock()


def free_port() -> int:
    """A port nothing listens on, never one this process was handed before. A port is
    chosen long before its server binds it (a cluster's NATS servers and nodes are all
    given theirs up front), and the kernel hands a released port out again: without the
    record, a node could be given a NATS server's port and answer its probes with NATS."""
    with _HANDED_OUT_LOCK:
        for _ in range(FREE_PORT_TRIES):
            with socket.socket() as s:
                s.bind((HOST, 0))
                port: int = s.getsockname()[1]
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
    raise RuntimeError(f"no port this process was not handed already in {FREE_PORT_TRIES} binds")


class ServerProcess:
    """A child process serving HTTP on ``HOST:port``; a context manager that stops it."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        port: int,
        ready_path: str,
        log_path: Path,
        *,
        any_status_is_ready: bool = False,
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.port = port
        self.ready_path = ready_path
        self.log_path = log_path
        self.any_status_is_ready = any_status_is_ready  # an answer at all means it serves
        self.unset: set[str] = set()  # variables it starts without, whatever os.environ has
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False  # SIGSTOPped by pause(), not yet resumed

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} is not running"
        return self.proc.pid

    def start(self) -> ServerProcess:
        self.spawn()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def spawn(self) -> ServerProcess:
        """Start the process without waiting for it to answer (a timed restart polls itself)."""
        if self.proc is not None:
            raise RuntimeError(f"{self.name} is already running (pid {self.proc.pid})")
        env = {k: v for k, v in {**os.environ, **self.env}.items() if k not in self.unset}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=env, stdout=log, stderr=log)
        return self

    def check_alive(self) -> None:
        """Raise with the log's tail if the process has exited."""
        assert self.proc is not None, f"{self.name} is not running"
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.tail()}")

    def answers(self) -> bool:
        """One readiness probe: True once the server serves."""
        url = f"http://{HOST}:{self.port}{self.ready_path}"
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                return bool(r.status == 200)
        except urllib.error.HTTPError as exc:
            exc.close()
            return self.any_status_is_ready
        except OSError:
            return False

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            self.check_alive()
            if self.answers():
                return
            time.sleep(READY_POLL_S)
        raise RuntimeError(f"{self.name} not ready in {START_TIMEOUT_S}s: {self.tail()}")

    def stop(self) -> int | None:
        """SIGTERM by PID, wait, then SIGKILL; returns the exit code."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            if self.paused:  # a stopped process handles SIGTERM only once continued
                proc.send_signal(signal.SIGCONT)
                self.paused = False
            try:
                return proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
        return proc.wait()

    def pause(self) -> None:
        """SIGSTOP by PID: the process is frozen (a long GC pause, a VM stall), its sockets
        stay open and the kernel keeps accepting connections for it."""
        assert self.proc is not None, f"{self.name} is not running"
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT by PID (harmless if it was not paused)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def kill(self) -> int | None:
        """SIGKILL by PID (a crash: no shutdown code runs) and reap it; returns the exit code."""
        proc, self.proc = self.proc, None
        self.paused = False  # SIGKILL ends a stopped process too
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        return proc.wait()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def tail(self) -> str:
        """The end of the log, for an error message."""
        return self.logs()[-4000:]

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def data_dir(work_dir: Path) -> Path:
    """Where ``service(work_dir)`` keeps its RocksDB."""
    return work_dir / "data"


class AppProcess(ServerProcess):
    """``python -m app`` (as a newcomer runs it) on ``data`` and a free port. The same
    object can be killed and spawned again: same port, same data dir.

    One process (ROCKTIMER_WORKERS=1: the store at the data dir's root) unless ``env``
    says otherwise: the figures and tests that read the store, the process's CPU or its
    memory mean the one process, whatever the machine's cores (the service's default).
    A variable ``env`` maps to None is not set at all (the service's default)."""

    def __init__(
        self, data: Path, log_path: Path, env: Mapping[str, str | None] | None = None
    ) -> None:
        argv = [sys.executable, "-m", "app"]
        super().__init__("rocktimer", argv, {}, free_port(), "/readyz", log_path)
        self.data_dir = data
        self.extra_env: Mapping[str, str | None] = env or {}  # may change between spawns

    def spawn(self) -> AppProcess:
        self.env = {
            "ROCKTIMER_HOST": HOST,
            "ROCKTIMER_PORT": str(self.port),
            "ROCKTIMER_DATA_DIR": str(self.data_dir),
            "ROCKTIMER_LOG_LEVEL": "warning",  # the quietest level that still shows problems
            "ROCKTIMER_WORKERS": "1",
            **{k: v for k, v in self.extra_env.items() if v is not None},
        }
        self.unset = {k for k, v in self.extra_env.items() if v is None}
        super().spawn()
        return self

    def start(self) -> AppProcess:
        super().start()
        return self

    def __enter__(self) -> AppProcess:
        return self.start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


def service(work_dir: Path, env: Mapping[str, str | None] | None = None) -> AppProcess:
    """The service on a fresh data dir under ``work_dir``."""
    return AppProcess(data_dir(work_dir), work_dir / "service.log", env)


def bare_app(work_dir: Path) -> ServerProcess:
    """``python -m bench.bare_app``: the ceiling of figure 1, under the same uvicorn settings."""
    port = free_port()
    argv = [sys.executable, "-m", "bench.bare_app", "--host", HOST, "--port", str(port)]
    return ServerProcess(
        "bare app", argv, {}, port, ROUTE, work_dir / "bare.log", any_status_is_ready=True
    )


class RedisServer(ServerProcess):
    """``redis-server`` on 127.0.0.1, a random port and its own temp dir, never daemonized.

    Durability equal to the service's: every write is in the append-only file and fsynced
    before its reply (``--appendonly yes --appendfsync always``); RDB snapshots off.
    """

    def __init__(self, binary: str, work_dir: Path) -> None:
        port = free_port()
        folder = work_dir / "redis"
        folder.mkdir(parents=True, exist_ok=True)
        argv = [
            binary,
            "--bind",
            HOST,
            "--port",
            str(port),
            "--dir",
            str(folder),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
            "--logfile",
            "",  # stdout, which goes to the log file
        ]
        super().__init__("redis-server", argv, {}, port, "", work_dir / "redis.log")

    def answers(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False


def redis_server_binary() -> str | None:
    """The redis-server executable on PATH (Debian's package: /usr/bin), or None."""
    return shutil.which("redis-server")


def dir_bytes(path: Path) -> int:
    """Disk space used by every file under ``path``, as ``du`` counts it (allocated blocks)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except FileNotFoundError:  # RocksDB removed it meanwhile (an obsolete WAL, SST)
                continue
    return total


# --- /proc sampling ------------------------------------------------------------------------


def status_kib(pid: int, field: str) -> int:
    """A ``kB`` line of /proc/<pid>/status (VmRSS, VmHWM), in KiB; 0 once the process is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads, those that ended too) so far,
    to the nanosecond: the process's CPU-time clock (clock_getcpuclockid's id, made by
    hand as CPython has no binding). /proc/<pid>/stat counts in 10 ms ticks, too coarse for
    a phase that takes a few ms of a server's CPU. Raises ProcessLookupError once the
    process is gone."""
    try:
        return time.clock_gettime((~pid << 3) | _CPUCLOCK_SCHED)
    except OSError as exc:  # EINVAL: no such process
        raise ProcessLookupError(pid) from exc


def tree(pid: int) -> list[int]:
    """A process and all its descendants alive now (a partitioned server's supervisor, its
    workers, their sealer children)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except (FileNotFoundError, ProcessLookupError):
        return [pid]
    return [pid] + [p for c in children for p in tree(int(c))]


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process and all its descendants alive now."""
    total = 0.0
    for each in tree(pid):
        try:
            total += cpu_seconds(each)
        except (FileNotFoundError, ProcessLookupError):  # exited meanwhile
            continue
    return total


def workers_of(supervisor: int) -> dict[int, int]:
    """Worker index -> pid of a partitioned server's workers (app/cluster/): the
    supervisor's children, each known by the unix socket it listens on, ``w<index>.sock``."""
    sockets: dict[str, int] = {}  # socket inode -> worker index
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) == 8 and fields[7].endswith(".sock"):
            name = os.path.basename(fields[7])
            if name.startswith("w") and name[1:-5].isdigit():
                sockets[fields[6]] = int(name[1:-5])
    found = {}
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    for pid in map(int, children):
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:  # exited meanwhile
            continue
        for fd in fds:
            try:
                link = os.readlink(fd)
            except OSError:  # closed meanwhile (a worker opens and closes files all along)
                continue
            if link.startswith("socket:[") and link[8:-1] in sockets:
                found[sockets[link[8:-1]]] = pid
    return found


IDLE_CORES = 0.10  # below this the server (RocksDB's background threads included) is quiet
IDLE_WINDOW_S = 0.5


def wait_idle(pid: int, *, timeout_s: float, window_s: float = IDLE_WINDOW_S) -> float:
    """Wait until the process used less than IDLE_CORES over one ``window_s``; the wait (s).

    After a storm RocksDB flushes and compacts for a while; a measurement that should
    see the store and not the CPU its background jobs take waits for them first. Gives up
    (and returns) after ``timeout_s``.
    """
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        before = cpu_seconds(pid)
        time.sleep(window_s)
        if cpu_seconds(pid) - before < IDLE_CORES * window_s:
            break
    return time.monotonic() - started


class RssSampler:
    """Samples VmRSS of a process every ``interval_s`` on a thread; keeps the peak."""

    def __init__(self, pid: int, interval_s: float = RSS_SAMPLE_S) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.peak_kib = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = status_kib(self.pid, "VmRSS")
            self.peak_kib = max(self.peak_kib, rss)
            self.samples += 1
            self._stop.wait(self.interval_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()


class CpuMeter:
    """CPU seconds used by the server and by this process (the load generator) over a span.
    ``tree``: the server's descendants too (a partitioned server's workers)."""

    def __init__(self, server_pid: int, *, tree: bool = False) -> None:
        self.server_pid = server_pid
        self._cpu = tree_cpu_seconds if tree else cpu_seconds
        self._start = (0.0, 0.0, 0.0)
        self.server_s = self.client_s = self.wall_s = 0.0

    def __enter__(self) -> CpuMeter:
        self._start = (self._cpu(self.server_pid), time.process_time(), time.monotonic())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        server, client, wall = self._start
        self.server_s = self._cpu(self.server_pid) - server
        self.client_s = time.process_time() - client
        self.wall_s = time.monotonic() - wall

    def describe(self) -> str:
        return describe_cpu(self.server_s, self.client_s, self.wall_s)


def describe_cpu(server_s: float, client_s: float, wall_s: float) -> str:
    """Cores busy on each side over ``wall_s``, e.g. ``server 1.4 cores, client 0.5``."""
    if wall_s <= 0:
        return "n/a"
    return f"server {server_s / wall_s:.2f} cores, client {client_s / wall_s:.2f}"


class Profile:
    """``py-spy record`` of a server over one phase, when BENCH_PYSPY_DIR names a folder.

    Opt-in: sampling costs the server CPU, so profiled figures read lower. The output is
    py-spy's raw (collapsed stack) format, one ``<name>.txt`` per phase.
    """

    def __init__(self, pid: int, name: str) -> None:
        self.pid = pid
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Profile:
        folder = os.environ.get("BENCH_PYSPY_DIR")
        if not folder:
            return self
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if not Path(spy).exists():
            raise RuntimeError("BENCH_PYSPY_DIR is set but py-spy is not installed")
        os.makedirs(folder, exist_ok=True)
        out = Path(folder) / f"{self.name}.txt"
        argv = [
            spy,
            "record",
            "--pid",
            str(self.pid),
            "--format",
            "raw",
            "--output",
            str(out),
            "--rate",
            str(PYSPY_RATE_HZ),
            "--nonblocking",
            "--threads",
            # BENCH_PYSPY_GIL=1: only the thread holding the GIL (plain sampling counts
            # threads waiting for it as busy)
            *(["--gil"] if os.environ.get("BENCH_PYSPY_GIL") else []),
        ]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=PYSPY_STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
