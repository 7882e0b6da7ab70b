# The data pipeline's image (compose profile `pipeline`): Java 17 + PySpark + rocktimer,
# so that pipeline.bulk_load validates rows with the service's own code. The default base
# is Debian bookworm's Python 3.11 image: bookworm has openjdk-17 (trixie, under
# python:3.11-slim today, does not). ROCKTIMER_BASE_IMAGE in compose overrides it.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1

# openjdk's postinst links its man page: slim images have no man1 directory.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*

COPY deploy/requirements-build.lock deploy/requirements-pipeline.lock /tmp/
RUN python3 -m pip install --no-cache-dir --require-hashes -r /tmp/requirements-build.lock \
 && python3 -m pip install --no-cache-dir --require-hashes --no-build-isolation -r /tmp/requirements-pipeline.lock \
 && rm /tmp/requirements*.lock

COPY pyproject.toml README.md /tmp/src/
COPY app /tmp/src/app
COPY storage /tmp/src/storage
COPY workers /tmp/src/workers
COPY pipeline /tmp/src/pipeline
RUN python3 -m pip install --no-cache-dir --no-deps --no-build-isolation /tmp/src \
 && rm -rf /tmp/src

# Spark's user name comes from here when the container runs under an id /etc/passwd lacks.
ENV SPARK_USER=rocktimer HADOOP_USER_NAME=rocktimer
WORKDIR /pipeline-data
CMD ["python3", "-m", "pipeline.report", "--help"]
