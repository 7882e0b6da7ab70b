"""The supervisor once its workers run: a small process that keeps them running.

The supervisor (supervisor.py) forks the first workers from its own imports, so their
pages are shared; then it replaces itself (exec, same PID: the workers stay its
children) with this module in an interpreter started without ``site``, importing the
standard library only. Kept as the heavy process, its copies of every page the workers
have written since the fork would stay its own (~15 MiB of a ~46 MiB process); this one
is ~3 MiB.

It does what the supervisor did: a worker that exits is started again at once (after a
pause that doubles, up to RESTART_PAUSE_MAX_S, while it keeps dying young) — now as a
new interpreter, ``python -m app.cluster.worker <index> <its pid>`` with the same environment,
which imports what it runs before it serves (its pages are its own); meanwhile the
others serve their own partitions and answer 503 + Retry-After for its. A worker that
exits for a bad setting stops them all (exit with its code). SIGTERM or SIGINT stops
every worker, SIGKILL after the stop timeout. It holds the port's claim (inherited
through the exec, app/__main__.py's ``claim_port``) for as long as it runs, so that no
other rocktimer starts on the port its workers serve.

Nothing here may import the service's modules, nor more of the standard library than
it uses: what it needs comes on its command line, written by the supervisor
(``boot_argv``).
"""

from __future__ import annotations

# signal's C module: the Python one wraps it in enums (an import of ~1 MiB held for good)
import _signal as signal  # type: ignore[import-not-found]
import os
import sys
import time

POLL_S = 0.05  # how soon a dead worker is noticed
YOUNG_S = 2.0  # a worker that dies sooner than this after its start is crash-looping
RESTART_PAUSE_MIN_S = 0.1
RESTART_PAUSE_MAX_S = 2.0
TEXT_FORMAT = "{time} {level} rocktimer: {message}"  # app/logs.py's text lines


def boot_argv(
    root: str,
    pids: list[int],
    *,
    claim_fd: int,
    bad_setting: int,
    stop_timeout_s: float,
    log_format: str,
) -> list[str]:
    """The command line that replaces the supervisor with this module: ``root`` is where
    ``app`` is imported from; the workers are restarted as ``python -m
    app.cluster.worker <index> <keeper pid>`` with this interpreter. ``claim_fd``: the
    port's claim (app/__main__.py's ``claim_port``; -1: none), inherited through the exec
    and held by the keeper alone."""
    boot = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from app.cluster.keeper import main; main(sys.argv[2:])"
    )
    plan = [str(bad_setting), repr(stop_timeout_s), log_format, str(claim_fd), *map(str, pids)]
    return [sys.executable, "-S", "-c", boot, root, *plan]


class Child:
    def __init__(self, index: int, pid: int, command: list[str]) -> None:
        self.index = index
        self.pid = pid
        self.command = command
        self.started = time.monotonic()
        self.pause = 0.0
        self.restart_at = 0.0

    def start(self) -> None:
        self.started = time.monotonic()
        self.pid = os.posix_spawn(
            self.command[0], [*self.command, str(self.index), str(os.getpid())], os.environ
        )

    def exit_code(self) -> int | None:
        done, status = os.waitpid(self.pid, os.WNOHANG)
        return os.waitstatus_to_exitcode(status) if done else None

    def wait(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.exit_code() is not None:
                return
            time.sleep(0.01)
        _signal(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


class Log:
    """Warnings in app/logs.py's two formats (its module needs what this one must not
    import): a text line, or a JSON object with the same fields."""

    def __init__(self, fmt: str) -> None:
        self.json = fmt == "json"

    def warning(self, message: str) -> None:
        now = time.time()
        if self.json:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
            fields = {
                "time": f"{stamp}.{int(now % 1 * 1000):03d}+00:00",
                "level": "warning",
                "logger": "rocktimer",
                "message": message,
            }
            line = "{" + ",".join(f'"{k}":"{_escaped(v)}"' for k, v in fields.items()) + "}"
        else:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
            line = TEXT_FORMAT.format(
                time=f"{stamp},{int(now % 1 * 1000):03d}", level="WARNING", message=message
            )
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:  # exited meanwhile
        return


def _escaped(text: str) -> str:
    """A JSON string's inside, for the ASCII lines written here."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def main(plan: list[str]) -> None:
    bad_setting, stop_timeout_s = int(plan[0]), float(plan[1])
    log = Log(plan[2])
    claim = int(plan[3])
    if claim >= 0:  # held open by this process; no worker it starts inherits it
        os.set_inheritable(claim, False)
    command = [sys.executable, "-m", "app.cluster.worker"]
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    children = [Child(i, int(pid), command) for i, pid in enumerate(plan[4:])]
    code = 0
    while not stopping:
        time.sleep(POLL_S)
        now = time.monotonic()
        for each in children:
            if stopping:
                break
            if not each.pid:
                if now >= each.restart_at:
                    each.start()
                continue
            if (status := each.exit_code()) is None:
                continue
            if status == bad_setting:
                log.warning(f"worker {each.index} exited for a bad setting: stopping")
                each.pid = 0
                code = bad_setting
                stopping = True
                break
            young = now - each.started < YOUNG_S
            each.pause = min(max(each.pause * 2, RESTART_PAUSE_MIN_S), RESTART_PAUSE_MAX_S)
            each.pause = each.pause if young else 0.0
            pause = f" in {each.pause:.1f} s" if each.pause else ""
            log.warning(
                f"worker {each.index} (pid {each.pid}) exited with {status}: "
                f"starting it again{pause}"
            )
            each.pid, each.restart_at = 0, now + each.pause
            if not each.pause:
                each.start()
    deadline = time.monotonic() + stop_timeout_s
    for each in children:
        if each.pid:
            _signal(each.pid, signal.SIGTERM)
    for each in children:
        if each.pid:
            each.wait(deadline)
    sys.exit(code)
