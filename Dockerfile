# The rocktimer service. Builds on python:3.11-slim, or on any Python 3.11 image where
# `python3 -m pip` may install (pass it as --build-arg BASE=..., ROCKTIMER_BASE_IMAGE in
# compose); tools/make-base-image makes one where Docker Hub is out of reach.
ARG BASE=python:3.11-slim
FROM ${BASE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1

# Dependencies first, from the locks (every package pinned and hash-checked; `make lock`
# keeps them in step with pyproject.toml), so a code change reuses this layer. The build
# system comes first: nothing is built with an unpinned setuptools fetched on the fly.
COPY requirements-build.lock requirements.lock /tmp/
RUN python3 -m pip install --no-cache-dir --require-hashes -r /tmp/requirements-build.lock \
 && python3 -m pip install --no-cache-dir --require-hashes --no-build-isolation -r /tmp/requirements.lock \
 && rm /tmp/requirements*.lock

# The project itself, built with the locked setuptools.
COPY pyproject.toml README.md /tmp/src/
COPY tools/build_backend /tmp/src/tools/build_backend
COPY app /tmp/src/app
COPY storage /tmp/src/storage
COPY workers /tmp/src/workers
# The rocktimer CLI and the generated client it uses (docker compose exec ... rocktimer tail).
COPY cli /tmp/src/cli
COPY clients/python /tmp/src/clients/python
RUN python3 -m pip install --no-cache-dir --no-deps --no-build-isolation /tmp/src \
 && rm -rf /tmp/src

# Runs as an unprivileged user; /data (the RocksDB directory) belongs to it, and a new
# named volume mounted there starts with that owner.
RUN useradd --user-group --uid 10001 --home-dir /data --no-create-home --shell /usr/sbin/nologin rocktimer \
 && mkdir /data && chown rocktimer:rocktimer /data
USER rocktimer
WORKDIR /srv/rocktimer
ENV ROCKTIMER_HOST=0.0.0.0 ROCKTIMER_PORT=8080 ROCKTIMER_DATA_DIR=/data
VOLUME /data
EXPOSE 8080
STOPSIGNAL SIGTERM
CMD ["python3", "-m", "app"]
