"""What the compose file and the Dockerfiles promise, checked without Docker.

The real thing (build, up, healthy, round trip, restart, volume) is ``make compose-smoke``;
CI has no engine, so here the files themselves are read.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from tools.lock import LOCKS

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = {
    "rocktimer": ROOT / "Dockerfile",
    "pipeline": ROOT / "pipeline" / "Dockerfile",
    "nats": ROOT / "nats-server" / "Dockerfile",
}


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    lines = (line.strip() for line in text.splitlines())
    return [
        (word.upper(), rest.strip())
        for word, _, rest in (line.partition(" ") for line in lines if line and line[0] != "#")
    ]


def test_the_service_is_healthchecked_on_readyz() -> None:
    check = compose()["services"]["rocktimer"]["healthcheck"]
    assert check["test"][0] == "CMD"
    assert "http://127.0.0.1:8080/readyz" in " ".join(check["test"])
    assert {"interval", "timeout", "retries", "start_period"} <= check.keys()


def test_data_lives_on_a_named_volume_at_the_images_data_dir() -> None:
    doc = compose()
    assert "rocktimer-data" in doc["volumes"]
    assert "rocktimer-data:/data" in doc["services"]["rocktimer"]["volumes"]
    service = instructions(DOCKERFILES["rocktimer"])
    assert ("VOLUME", "/data") in service
    assert any(i == "ENV" and "ROCKTIMER_DATA_DIR=/data" in a.split() for i, a in service)


def test_the_port_is_published_on_localhost_8080_unless_configured() -> None:
    ports = compose()["services"]["rocktimer"]["ports"]
    assert ports == ["${ROCKTIMER_PUBLISH:-127.0.0.1:8080}:8080"]


def test_the_service_runs_as_a_user_the_image_creates_and_who_owns_data() -> None:
    steps = instructions(DOCKERFILES["rocktimer"])
    users = [a for i, a in steps if i == "USER"]
    assert users == ["rocktimer"]
    run = " ".join(a for i, a in steps if i == "RUN")
    assert "useradd" in run
    assert "chown rocktimer:rocktimer /data" in run
    user_at = steps.index(("USER", "rocktimer"))
    assert steps[-1] == ("CMD", '["python3", "-m", "app"]')
    assert user_at < len(steps) - 1


def test_images_install_the_build_lock_then_hash_checked_deps_then_the_project() -> None:
    build, runtime, pipeline, _nats = LOCKS
    services = (DOCKERFILES["rocktimer"], DOCKERFILES["pipeline"])
    for dockerfile, deps in zip(services, (runtime, pipeline), strict=True):
        steps = instructions(dockerfile)
        copies = [a for i, a in steps if i == "COPY"]
        assert f"{build.name} {deps.name} /tmp/" in copies
        pip = [p for i, a in steps if i == "RUN" for p in a.split("&&") if "pip install" in p]
        assert [p.split("pip install", 1)[1].strip() for p in pip] == [
            f"--no-cache-dir --require-hashes -r /tmp/{build.path.name}",
            f"--no-cache-dir --require-hashes --no-build-isolation -r /tmp/{deps.path.name}",
            "--no-cache-dir --no-deps --no-build-isolation /tmp/src",
        ]


def test_the_build_context_holds_everything_the_dockerfiles_copy() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    allowed = {line[1:] for line in ignore if line.startswith("!")}
    assert "*" in ignore  # everything not listed stays out
    for dockerfile in DOCKERFILES.values():
        for instruction, args in instructions(dockerfile):
            if instruction == "COPY":
                sources = shlex.split(args)[:-1]
                assert set(sources) <= allowed, dockerfile


def test_the_pipeline_jobs_are_a_profile_over_the_services_volume_and_url() -> None:
    services = compose()["services"]
    assert "profiles" not in services["rocktimer"]  # a plain `up` builds only the service
    report, bulk_load = services["report"], services["bulk_load"]
    for job, module in ((report, "pipeline.report"), (bulk_load, "pipeline.bulk_load")):
        assert job["profiles"] == ["pipeline"]
        assert job["image"] == "rocktimer-pipeline:latest"
        assert job["build"]["dockerfile"] == "pipeline/Dockerfile"
        assert job["entrypoint"][:3] == ["python3", "-m", module]
    assert "rocktimer-data:/data:ro" in report["volumes"]
    # The data dir, not its events/: a partitioned one keeps a log per partition (p<k>/events).
    assert report["entrypoint"][3:] == ["--events", "/data"]
    assert "ROCKTIMER_URL=http://rocktimer:8080" in bulk_load["environment"]
    assert bulk_load["depends_on"]["rocktimer"]["condition"] == "service_healthy"


def test_the_pipeline_image_has_java_17() -> None:
    run = " ".join(a for i, a in instructions(DOCKERFILES["pipeline"]) if i == "RUN")
    assert "openjdk-17-jre-headless" in run


NATS = ("nats1", "nats2", "nats3")
NODES = ("node1", "node2", "node3")


def test_the_cluster_profile_is_three_nats_servers_and_three_nodes() -> None:
    services = compose()["services"]
    volumes = set(compose()["volumes"])
    for name in (*NATS, *NODES):
        assert services[name]["profiles"] == ["cluster"], name
    for name in NATS:
        nats = services[name]
        assert nats["image"] == "rocktimer-nats:latest"
        assert nats["build"]["dockerfile"] == "nats-server/Dockerfile"
        assert f"NATS_SERVER_NAME={name}" in nats["environment"]
        assert nats["volumes"] == [f"{name}-data:/data"]
        assert f"{name}-data" in volumes
        assert "8222/healthz" in " ".join(nats["healthcheck"]["test"])
    urls = ",".join(f"nats://{n}:4222" for n in NATS)
    published = set()
    for name in NODES:
        node = services[name]
        env = node["environment"]
        assert node["image"] == "rocktimer:latest"
        assert f"ROCKTIMER_CLUSTER={urls}" in env
        assert f"ROCKTIMER_NODE_ID={name}" in env
        assert f"ROCKTIMER_ADVERTISE={name}:8080" in env
        assert node["volumes"] == [f"{name}-data:/data"]  # a data dir of its own
        assert set(node["depends_on"]) == set(NATS)
        assert "/readyz" in " ".join(node["healthcheck"]["test"])
        (port,) = node["ports"]
        published.add(port)
        assert port.startswith(f"${{ROCKTIMER_{name.upper()}_PUBLISH:-127.0.0.1:808")
    assert len(published) == len(NODES)


def test_the_nats_image_installs_only_the_hash_checked_server() -> None:
    nats_lock = LOCKS[-1]
    steps = instructions(DOCKERFILES["nats"])
    assert f"{nats_lock.name} /tmp/" in [a for i, a in steps if i == "COPY"]
    pip = [p for i, a in steps if i == "RUN" for p in a.split("&&") if "pip install" in p]
    assert [p.split("pip install", 1)[1].strip() for p in pip] == [
        f"--no-cache-dir --require-hashes -r /tmp/{nats_lock.path.name}"
    ]
    assert [a for i, a in steps if i == "USER"] == ["nats"]
    assert steps[-1] == ("CMD", '["nats-server", "--config", "/etc/nats-server/nats.conf"]')


def test_the_nats_config_routes_to_every_server_and_takes_the_sync_policy() -> None:
    conf = (ROOT / "nats-server" / "nats.conf").read_text()
    for name in NATS:
        assert f'"nats-route://{name}:6222"' in conf
    assert "sync_interval: $NATS_SYNC_INTERVAL" in conf
    assert "server_name: $NATS_SERVER_NAME" in conf
