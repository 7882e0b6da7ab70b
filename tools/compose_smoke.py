"""``make compose-smoke``: the compose deployment, built and used the way a user would.

Builds the image, brings the stack up with whichever compose this machine has (``docker
compose`` v2 or ``docker-compose`` v1), waits for the healthcheck, sends → receives →
acks a message, restarts the container and finds a pending message still there, then
``down`` + ``up`` and finds both again on the named volume; at the end (pass or fail) it
tears everything down with the volume. It runs as its own compose project on a free
port, so it never touches a stack started with ``docker compose up`` or a ``make run``.

What is missing (no docker CLI, no compose, an engine that is not running, no base
image) is said in one line with how to get it, exit code 2. A failed check: exit 1.
The last line on stdout is one JSON object with the timings.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
SERVICE = "rocktimer"
IMAGE = "rocktimer:latest"
PIPELINE_IMAGE = "rocktimer-pipeline:latest"
HUB_BASE = "python:3.11-slim"
LOCAL_BASE = "rocktimer-base:py311"  # tools/make-base-image's default tag
HEALTHY_TIMEOUT_S = 120
BUILD_TIMEOUT_S = 1800


class Missing(Exception):
    """A prerequisite is absent; the message says which and how to get it."""


class Failed(Exception):
    """A check of the running stack failed."""


def say(message: str) -> None:
    print(f"compose-smoke: {message}", flush=True)


def run(
    command: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def find_compose() -> list[str]:
    """The compose command, after checking the CLI and that the engine answers."""
    if shutil.which("docker") is None:
        raise Missing(
            "no docker CLI: install Docker Engine (Debian: apt-get install -y docker.io "
            "docker-compose; elsewhere https://docs.docker.com/engine/install/)"
        )
    info = run(["docker", "info", "--format", "{{.ServerVersion}}"], timeout=30)
    if info.returncode != 0:
        if "permission denied" in info.stderr.lower():
            raise Missing(
                "the Docker engine refuses this user: run as root or join the docker group"
            )
        raise Missing(
            "the Docker engine is not running: start it (`sudo systemctl start docker`, "
            "or `sudo dockerd >/tmp/dockerd.log 2>&1 &` where there is no systemd)"
        )
    if run(["docker", "compose", "version"]).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose") and run(["docker-compose", "version"]).returncode == 0:
        return ["docker-compose"]
    raise Missing(
        "no compose: install the compose plugin (`docker compose`) or docker-compose "
        "(Debian: apt-get install -y docker-compose)"
    )


def have_image(tag: str) -> bool:
    return run(["docker", "image", "inspect", tag]).returncode == 0


def base_image(wanted: str | None) -> str:
    """ROCKTIMER_BASE_IMAGE if set, else python:3.11-slim, else the locally built one."""
    candidate = wanted or HUB_BASE
    if have_image(candidate) or run(["docker", "pull", candidate], timeout=300).returncode == 0:
        return candidate
    if not wanted and have_image(LOCAL_BASE):
        return LOCAL_BASE
    raise Missing(
        f"no base image: {candidate} is not here and cannot be pulled (no Docker Hub?): "
        f"build a local one with `sudo tools/make-base-image` (~2 min) and run again "
        f"(it is used as {LOCAL_BASE}, or name one with ROCKTIMER_BASE_IMAGE=<tag>)"
    )


DATA_DIR = "/data"  # the service's data dir in its container (the volume)


def find_segments(data_dir: str) -> list[str]:
    """A find(1) command line printing the sealed event segments of ``data_dir``: its
    ``events/`` with one worker, each partition's ``p<k>/events/`` with several (the
    image starts one worker per CPU); a segment still being written has a hidden name."""
    return ["find", data_dir, "-path", "*/events/*", "-name", "part-*.parquet"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Endpoint:
    """An HTTP API the smoke calls: the service, or one node of the cluster."""

    def __init__(self, port: int) -> None:
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=15)

    def expect(self, method: str, path: str, status: int, body: object = None) -> dict[str, object]:
        reply = self.http.request(method, path, json=body)
        if reply.status_code != status:
            raise Failed(
                f"{method} {path}: {reply.status_code} {reply.text[:300]}, expected {status}"
            )
        result: dict[str, object] = reply.json() if reply.content else {}
        return result


class Stack(Endpoint):
    """One compose project of its own, on a free port, torn down with its volume."""

    def __init__(self, compose: list[str], base: str) -> None:
        self.port = free_port()
        self.project = f"rocktimer-smoke-{os.getpid()}"
        self.compose = [
            *compose,
            "--project-name",
            self.project,
            "--file",
            str(ROOT / "docker-compose.yml"),
        ]
        self.env = {
            **os.environ,
            "ROCKTIMER_BASE_IMAGE": base,
            "ROCKTIMER_PUBLISH": f"127.0.0.1:{self.port}",
        }
        self.pipeline_dir = Path(tempfile.mkdtemp(prefix=f"{self.project}-"))
        self.env["ROCKTIMER_PIPELINE_DIR"] = str(self.pipeline_dir)
        super().__init__(self.port)

    def __call__(self, *args: str, timeout: float = 180) -> str:
        done = run([*self.compose, *args], self.env, timeout)
        if done.returncode != 0:
            raise Failed(f"`compose {' '.join(args)}` failed: {done.stderr.strip()[-2000:]}")
        return done.stdout

    def build(self, service: str) -> float:
        started = time.monotonic()
        done = subprocess.run(
            [*self.compose, "--profile", "pipeline", "build", service],
            env=self.env,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )  # output goes to the terminal: a first build takes minutes
        if done.returncode != 0:
            raise Failed(f"the image did not build (exit {done.returncode}, output above)")
        return time.monotonic() - started

    def container(self, service: str = SERVICE) -> str:
        cid = self("--profile", "cluster", "ps", "-q", service).strip()
        if not cid:
            raise Failed(f"no container for {service}")
        return cid

    def wait_healthy(self, service: str = SERVICE) -> float:
        """Seconds from now until Docker's healthcheck of ``service`` says healthy."""
        started = time.monotonic()
        cid = self.container(service)
        while time.monotonic() - started < HEALTHY_TIMEOUT_S:
            state = run(
                ["docker", "inspect", "-f", "{{.State.Status}} {{.State.Health.Status}}", cid]
            )
            status, _, health = state.stdout.strip().partition(" ")
            if health == "healthy":
                return time.monotonic() - started
            if status in {"exited", "dead"} or health == "unhealthy":
                raise Failed(f"{service} {status}/{health}: {self.logs(service)}")
            time.sleep(0.2)
        raise Failed(f"{service} not healthy in {HEALTHY_TIMEOUT_S} s: {self.logs(service)}")

    def up(self) -> float:
        started = time.monotonic()
        self("up", "--detach", SERVICE)
        self.wait_healthy()
        return time.monotonic() - started

    def user(self) -> str:
        return run(["docker", "exec", self.container(), "id", "-un"]).stdout.strip()

    def logs(self, service: str = SERVICE) -> str:
        done = run(
            [*self.compose, "--profile", "cluster", "logs", "--tail", "30", service], self.env
        )
        return done.stdout[-3000:]

    def rss_mib(self) -> float:
        """Resident memory of the server (PID 1 of the container), from /proc."""
        status = run(["docker", "exec", self.container(), "cat", "/proc/1/status"]).stdout
        kib = next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")
        )
        return kib / 1024

    def image_mb(self, tag: str) -> float:
        return int(run(["docker", "image", "inspect", "-f", "{{.Size}}", tag]).stdout) / 1e6

    def wait_for_events(self, timeout_s: float = 60) -> None:
        """Until the service's exporter has sealed a Parquet segment in the data dir."""
        deadline = time.monotonic() + timeout_s
        find = ["docker", "exec", self.container(), *find_segments(DATA_DIR)]
        while not run(find).stdout.strip():
            if time.monotonic() > deadline:
                raise Failed(f"no event segment under {DATA_DIR} after {timeout_s:.0f} s")
            time.sleep(1)

    def down(self, volumes: bool) -> None:
        self(
            *("--profile", "cluster", "--profile", "pipeline"),
            "down",
            "--timeout",
            "30",
            *(["--volumes", "--remove-orphans"] if volumes else []),
        )

    def close(self, quiet: bool) -> None:
        """Tear down containers, network and volume; ``quiet``: while failing already."""
        self.http.close()
        try:
            self.down(volumes=True)
        except (Failed, subprocess.TimeoutExpired) as failed:
            if not quiet:
                raise
            say(f"teardown failed too ({failed}): `... --project-name {self.project} down -v`")
        else:
            say("torn down (containers, network, volume)")


TOPIC = "/v1/topics/smoke"
GROUP = f"{TOPIC}/groups/smoke"
LATER = {"msg_id": "later", "body": "", "delay_ms": 3_600_000}  # pending for an hour


def round_trip(stack: Endpoint) -> None:
    """send → receive → ack, and a pending message (due in an hour) left behind."""
    stack.expect("POST", f"{TOPIC}/messages", 201, {"msg_id": "now", "body": "hello"})
    stack.expect("POST", f"{TOPIC}/messages", 201, LATER)
    got = stack.expect("POST", f"{GROUP}/receive", 200, {"max_messages": 10, "wait_ms": 10_000})
    messages = got.get("messages")
    if not isinstance(messages, list) or [m["msg_id"] for m in messages] != ["now"]:
        raise Failed(f"receive returned {got}, expected the message 'now'")
    receipt = messages[0]["receipt"]
    acked = stack.expect("POST", f"{GROUP}/ack", 200, {"receipts": [receipt]})
    if acked.get("results") != [{"receipt": receipt, "status": "acked"}]:
        raise Failed(f"ack answered {acked}")


def still_there(stack: Endpoint, after: str) -> None:
    """The pending message is still scheduled, the acked one still acked."""
    later = stack.expect("GET", f"{TOPIC}/messages/later", 200).get("state")
    now = stack.expect("GET", f"{GROUP}/messages/now", 200).get("state")
    if (later, now) != ("scheduled", "acked"):
        raise Failed(f"after {after}: 'later' is {later}, 'now' is {now}")


def service(stack: Stack) -> dict[str, float]:
    figures = {"build_s": stack.build(SERVICE)}
    say(f"built in {figures['build_s']:.1f} s")
    figures["up_to_healthy_s"] = stack.up()
    figures["idle_rss_mib"] = stack.rss_mib()
    if (user := stack.user()) != "rocktimer":
        raise Failed(f"the server runs as {user!r}, not as the image's user rocktimer")
    up, rss = figures["up_to_healthy_s"], figures["idle_rss_mib"]
    say(f"healthy {up:.1f} s after up, idle RSS {rss:.0f} MiB")
    round_trip(stack)
    say("send → receive → ack: ok")
    stack("restart", SERVICE)
    figures["restart_to_healthy_s"] = stack.wait_healthy()
    still_there(stack, "restart")
    say("restart: the pending message is still there")
    stack.down(volumes=False)
    figures["down_up_to_healthy_s"] = stack.up()
    still_there(stack, "down + up")
    say("down + up: the volume kept both messages")
    figures["image_mb"] = stack.image_mb(IMAGE)
    return figures


def summary(output: str) -> dict[str, Any]:
    """A job's figures: the JSON object on the last line of its stdout."""
    lines = output.strip().splitlines()
    try:
        found: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise Failed(f"no JSON summary on the last line of: {output[-1000:]}") from None
    return found


def pipeline(stack: Stack) -> dict[str, float]:
    """The `pipeline` profile: generate → bulk_load into the service → report on its volume."""
    figures = {"pipeline_build_s": stack.build("report")}
    say(f"pipeline image built in {figures['pipeline_build_s']:.1f} s")
    job = ("--profile", "pipeline", "run", "--rm")
    plan = ("plan.parquet", "--format", "parquet")
    generate = ("--entrypoint", "python3", "bulk_load", "-m", "pipeline.generate", "--out", *plan)
    made = summary(stack(*job, *generate, "--rows", "200", timeout=600))
    started = time.monotonic()
    loaded = summary(
        stack(*job, "bulk_load", "--input", *plan, "--rejects", "rejects", timeout=600)
    )
    figures["bulk_load_s"] = time.monotonic() - started
    counted = sum(loaded[k] for k in ("loaded", "already_present", "rejected"))
    if loaded["rows"] != made["rows"] or counted != made["rows"]:
        raise Failed(f"generated {made}, bulk_load said {loaded}")
    say(f"bulk_load: {loaded['loaded']} loaded, {loaded['rejected']} rejected of {loaded['rows']}")
    stack.wait_for_events()
    started = time.monotonic()
    reported = summary(stack(*job, "report", timeout=600))
    figures["report_s"] = time.monotonic() - started
    html = stack.pipeline_dir / "report" / "report.html"
    if reported.get("events", 0) < 1 or not html.is_file():
        raise Failed(f"report said {reported}; {html} {'is' if html.is_file() else 'is not'} there")
    say(f"report over {reported['events']} events: {html}")
    figures["pipeline_image_mb"] = stack.image_mb(PIPELINE_IMAGE)
    return figures


NATS_SERVERS = ("nats1", "nats2", "nats3")
NODES = ("node1", "node2", "node3")


def cluster(stack: Stack) -> dict[str, float]:
    """The `cluster` profile: 3 NATS servers, 3 nodes; a message sent through one node is
    received through another and acked through the third; a node restarted, the cluster
    still answers through every node and the pending message is still there."""
    ports = {name: free_port() for name in NODES}
    for name, port in ports.items():
        stack.env[f"ROCKTIMER_{name.upper()}_PUBLISH"] = f"127.0.0.1:{port}"
    started = time.monotonic()
    stack("--profile", "cluster", "build", "nats1", "node1", timeout=BUILD_TIMEOUT_S)
    figures = {"cluster_build_s": time.monotonic() - started}
    say(f"cluster images built in {figures['cluster_build_s']:.1f} s")
    started = time.monotonic()
    stack("--profile", "cluster", "up", "--detach", *NATS_SERVERS, *NODES, timeout=300)
    for name in NODES:
        stack.wait_healthy(name)
    figures["cluster_up_to_healthy_s"] = time.monotonic() - started
    say(f"3 NATS servers and 3 nodes healthy {figures['cluster_up_to_healthy_s']:.1f} s after up")
    nodes = [Endpoint(ports[name]) for name in NODES]
    try:
        nodes[0].expect("POST", f"{TOPIC}/messages", 201, {"msg_id": "now", "body": "hello"})
        nodes[1].expect("POST", f"{TOPIC}/messages", 201, LATER)
        got = nodes[1].expect(
            "POST", f"{GROUP}/receive", 200, {"max_messages": 10, "wait_ms": 10_000}
        )
        messages = got.get("messages")
        if not isinstance(messages, list) or [m["msg_id"] for m in messages] != ["now"]:
            raise Failed(f"receive through node2 returned {got}, expected the message 'now'")
        receipt = messages[0]["receipt"]
        acked = nodes[2].expect("POST", f"{GROUP}/ack", 200, {"receipts": [receipt]})
        if acked.get("results") != [{"receipt": receipt, "status": "acked"}]:
            raise Failed(f"ack through node3 answered {acked}")
        say("send (node1) → receive (node2) → ack (node3): ok")
        started = time.monotonic()
        stack("--profile", "cluster", "restart", "node1", timeout=120)
        stack.wait_healthy("node1")
        figures["node_restart_to_healthy_s"] = time.monotonic() - started
        for node in nodes:
            still_there(node, "a node's restart")
        say("node1 restarted: every node still answers, both messages are there")
    finally:
        for node in nodes:
            node.http.close()
    return figures


def smoke(
    compose: list[str], base: str, with_pipeline: bool, with_cluster: bool = False
) -> dict[str, float]:
    stack = Stack(compose, base)
    say(f"{' '.join(compose)}, base image {base}, project {stack.project}, port {stack.port}")
    try:
        figures = service(stack)
        if with_pipeline:
            figures |= pipeline(stack)
        if with_cluster:
            figures |= cluster(stack)
    except BaseException:
        stack.close(quiet=True)
        raise
    stack.close(quiet=False)
    return {k: round(v, 1) for k, v in figures.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.compose_smoke", description=__doc__)
    parser.add_argument(
        "--pipeline", action="store_true", help="also build the pipeline image and run its jobs"
    )
    parser.add_argument(
        "--cluster", action="store_true", help="also run the `cluster` profile (3 NATS, 3 nodes)"
    )
    args = parser.parse_args(argv)
    try:
        compose = find_compose()
        base = base_image(os.environ.get("ROCKTIMER_BASE_IMAGE") or None)
        figures = smoke(compose, base, args.pipeline, args.cluster)
    except Missing as missing:
        say(f"missing: {missing}")
        return 2
    except (Failed, httpx.HTTPError, subprocess.TimeoutExpired) as failed:
        say(f"FAILED: {failed}")
        return 1
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    say(
        f"OK: build {figures['build_s']} s, up → healthy {figures['up_to_healthy_s']} s, "
        f"idle RSS {figures['idle_rss_mib']} MiB, image {figures['image_mb']} MB"
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
