# Docker Hub is not reachable from every build machine: pass a locally built Python 3.11
# base image (e.g. from debootstrap + `docker import`) with --build-arg BASE=...
ARG BASE=python:3.11-slim
FROM ${BASE}
WORKDIR /srv/rocktimer
COPY pyproject.toml README.md ./
COPY app app
COPY storage storage
COPY workers workers
# The rocktimer CLI and the generated client it uses (docker compose exec ... rocktimer tail).
COPY cli cli
COPY clients/python clients/python
RUN python3 -m pip install --no-cache-dir .
ENV ROCKTIMER_HOST=0.0.0.0 ROCKTIMER_PORT=8080 ROCKTIMER_DATA_DIR=/data
VOLUME /data
EXPOSE 8080
STOPSIGNAL SIGTERM
CMD ["python3", "-m", "app"]
