"""What every job shares: the common flags, the Spark session, the progress line, the
one-line error (exit 2) and the JSON summary as the last line on stdout."""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import orjson

from app import defaults

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
PROGRESS_EVERY_S = 2.0  # how often the progress line on stderr is redrawn
# What pyproject.toml's `pipeline` extra brings (py4j comes with pyspark): not in the
# `make run` venv, so a job run there is told how to get them.
EXTRA_MODULES = frozenset({"pyspark", "py4j", "pandas", "matplotlib"})
GET_EXTRA = (
    "pip install -e '.[pipeline]' (make .venv/.test-stamp installs it too) and a Java 17 runtime"
)
LOOPBACK = "127.0.0.1"


class JobError(Exception):
    """Bad arguments, an unreadable input or a missing column: one line on stderr, exit 2."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (not the usage block) on a bad argument."""

    def error(self, message: str) -> NoReturn:
        raise JobError(message)


def parser(prog: str, description: str, service: bool = False) -> ArgumentParser:
    """The job's parser with ``--master`` (and ``--url``/``--api-key`` if it calls the service)."""
    p = ArgumentParser(prog=f"python -m pipeline.{prog}", description=description)
    p.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    if service:
        p.add_argument(
            "--url",
            default=os.environ.get("ROCKTIMER_URL", defaults.URL),
            help=f"the service (default $ROCKTIMER_URL or {defaults.URL})",
        )
        p.add_argument(
            "--api-key",
            default=os.environ.get("ROCKTIMER_API_KEY"),
            help="a producer API key (default $ROCKTIMER_API_KEY)",
        )
    return p


def positive_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


def require_path(path: str, directory: bool = False, master: str = "local") -> None:
    """Exit 2 before Spark starts if a local ``path`` is not there. A path with a scheme
    (hdfs://, s3a://) or any path on a cluster (its default file system) is Spark's to
    read: an error there is one line too (``main``)."""
    if not is_local_path(path, master):
        return
    local = path.removeprefix("file://")
    found = os.path.isdir(local) if directory else os.path.exists(local)
    if not found:
        raise JobError(f"{path}: no such {'directory' if directory else 'file or directory'}")


def is_local_path(path: str, master: str) -> bool:
    """Whether ``path`` names this machine's disk: no scheme (or file:) under a local master."""
    scheme = path.partition("://")[0] if "://" in path else ""
    return master.startswith("local") and scheme in ("", "file")


def _local_cores(master: str) -> int:
    """N of local[N] / local[N,F]; the machine's cores for local[*] and local."""
    inside = master.partition("[")[2].partition("]")[0].split(",")[0]
    return int(inside) if inside.isdigit() else os.cpu_count() or 1


# A local master's JVM (the driver is the executor there) for a job whose rows stream
# through it (bulk_load), on a machine whose cores Spark, its Python workers and the
# service share:
# - the serial collector: its young pauses over short-lived rows are as short as G1's,
#   and it runs no concurrent marking or refinement threads;
# - C2 (the optimising JIT) only for code three times as hot as by default: a job's JVM
#   lives a minute, and C2 spent most of its time on code that ran only while the session
#   started and the query was planned; the per-row code is that hot within moments.
SERIAL_GC = "-XX:+UseSerialGC"
STREAMING_JIT = (
    "-XX:Tier4InvocationThreshold=15000",
    "-XX:Tier4MinInvocationThreshold=2000",
    "-XX:Tier4CompileThreshold=45000",
    "-XX:Tier4BackEdgeThreshold=120000",
)
# Where a collector may be chosen already (two are a JVM that does not start).
JAVA_OPTION_VARIABLES = (
    "PYSPARK_SUBMIT_ARGS",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
)
_GC_FLAG = re.compile(r"-XX:\+Use\w+GC\b")


def gc_chosen() -> bool:
    """A collector is named in the environment or in spark-defaults.conf (SPARK_CONF_DIR
    or SPARK_HOME/conf): the JVM keeps that one."""
    texts = [os.environ.get(name, "") for name in JAVA_OPTION_VARIABLES]
    folders = [
        os.environ.get("SPARK_CONF_DIR"),
        os.path.join(os.environ.get("SPARK_HOME", ""), "conf"),
    ]
    for folder in folders:
        if folder:
            try:
                with open(os.path.join(folder, "spark-defaults.conf"), encoding="utf-8") as f:
                    texts.append(f.read())
            except OSError:
                pass
    return any(_GC_FLAG.search(text) for text in texts)


def streaming_jvm_options() -> str:
    """The JVM options of a local streaming job: ``STREAMING_JIT`` and ``SERIAL_GC`` (but
    a collector chosen already, ``gc_chosen``)."""
    return " ".join([*STREAMING_JIT, *([] if gc_chosen() else [SERIAL_GC])])


def session(master: str, app_name: str, streaming: bool = False) -> Any:
    """A SparkSession on ``master``; UTC session time, quiet logs, workers on this Python.
    ``streaming``: on a local master, its JVM starts with ``streaming_jvm_options``."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if master.startswith("local"):
        if streaming:
            # Put before spark.driver.extraJavaOptions, which stay the user's own (and win).
            builder = builder.config("spark.driver.defaultJavaOptions", streaming_jvm_options())
        # Nothing on one machine needs the network: the driver, its block manager and the
        # UI listen on loopback, not on the host's first interface (SPARK_LOCAL_IP is what
        # the JVM and the UI read; the conf is what the driver advertises and binds).
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
        builder = builder.config("spark.driver.host", os.environ["SPARK_LOCAL_IP"]).config(
            "spark.driver.bindAddress", os.environ["SPARK_LOCAL_IP"]
        )
        # The executors' Python is ours (it has pipeline/ and app/); on a cluster it is the
        # nodes' own, configured there (spark.pyspark.python).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        # Spark's 200 shuffle partitions are 200 Python tasks for a handful of rows here.
        builder = builder.config("spark.sql.shuffle.partitions", str(2 * _local_cores(master)))
    spark = (
        builder.master(master)
        .appName(f"rocktimer-{app_name}")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")  # ours is one line, on stderr
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def hadoop_path_errors(path: str) -> Iterator[None]:
    """A Hadoop FileSystem error about ``path`` (a scheme with no FileSystem on the
    classpath, a name node that does not answer, no permission) as a JobError: one line
    naming the path, exit 2."""
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]

    try:
        yield
    except Py4JJavaError as exc:
        raise JobError(f"{path}: {first_line(exc)}") from None


def filesystem(spark: Any, path: str) -> tuple[Any, Any]:
    """(Hadoop FileSystem, Path) for ``path``, the ones Spark reads and writes it with."""
    jvm = spark.sparkContext._jvm
    with hadoop_path_errors(path):
        target = jvm.org.apache.hadoop.fs.Path(path)
        return target.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), target


def write_file(spark: Any, path: str, data: bytes) -> None:
    """``data`` as the file ``path`` through Hadoop's FileSystem (the one Spark reads and
    writes with): the driver's disk only when ``path`` is local, created or replaced."""
    fs, target = filesystem(spark, path)
    with hadoop_path_errors(path):
        fs.setWriteChecksum(False)  # no hidden .crc beside each file on a local disk
        stream = fs.create(target, True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()


@contextmanager
def progress(spark: Any, label: str, figures: Callable[[], str] | None = None) -> Iterator[None]:
    """A progress line on stderr (``label: stage s a/b, 12 s``, with ``figures()`` after
    the label when given) while the body runs."""
    stop = threading.Event()
    started = time.monotonic()
    tty = sys.stderr.isatty()

    def draw() -> None:
        tracker = spark.sparkContext.statusTracker()
        while not stop.wait(PROGRESS_EVERY_S):
            parts = []
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    parts.append(f"stage {stage_id} {info.numCompletedTasks}/{info.numTasks}")
            if figures is not None:
                parts.insert(0, figures())
            line = f"{label}: {', '.join(parts) or 'working'}, {time.monotonic() - started:.0f} s"
            sys.stderr.write(f"\r{line}\x1b[K" if tty else f"{line}\n")
            sys.stderr.flush()

    thread = threading.Thread(target=draw, name="progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        if tty:
            sys.stderr.write("\r\x1b[K")


def emit(summary: dict[str, Any]) -> None:
    """The job's figures: one JSON object, the last line on stdout."""
    sys.stdout.write(orjson.dumps(summary).decode() + "\n")
    sys.stdout.flush()


def main(job: Callable[[list[str]], int], argv: list[str] | None = None) -> NoReturn:
    """Run ``job``; a JobError (or an input Spark cannot read) is one line and exit 2."""
    try:
        code = job(sys.argv[1:] if argv is None else argv)
    except JobError as exc:
        sys.stderr.write(f"error: {exc}\n")
        code = EXIT_USAGE
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in EXTRA_MODULES:
            raise
        sys.stderr.write(f"error: the Spark jobs need the pipeline extra ({exc}): {GET_EXTRA}\n")
        code = EXIT_USAGE
    except Exception as exc:
        message = _spark_input_error(exc)
        if message is None:
            raise
        sys.stderr.write(f"error: {message}\n")
        code = EXIT_USAGE
    sys.exit(code)


def first_line(exc: BaseException) -> str:
    """One line for an error: a JVM error's root cause (Py4J's own first line only says
    which call failed), else the first non-empty line (Spark's run to pages of stack)."""
    cause = getattr(exc, "java_exception", None)
    while cause is not None and cause.getCause() is not None:
        cause = cause.getCause()
    text = str(cause.getMessage() or cause.toString()) if cause is not None else str(exc)
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


def _spark_input_error(exc: Exception) -> str | None:
    """Spark's own errors for a missing path or column, as one line; None for anything else."""
    try:
        from pyspark.errors import AnalysisException
    except ImportError:  # no Spark: no Spark error either (the caller's own is raised)
        return None

    if isinstance(exc, AnalysisException):
        return first_line(exc)
    return None
