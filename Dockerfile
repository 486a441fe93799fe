# syntax=docker/dockerfile:1.7
# The agentrl operator image: kopf controller only (no GPU stack), non-root, and happy on a
# read-only root filesystem (no writes at runtime; bytecode is compiled at build time).
#
#   docker build -t agentrl-operator .
#
# Python 3.12 on Debian bookworm, pinned by digest. Refresh deliberately:
#   docker buildx imagetools inspect python:3.12-slim-bookworm
ARG PYTHON_IMAGE=python:3.12-slim-bookworm@sha256:782412e85d0f0984994c290652577d4018aff08145c85b262bb63dc0c7522254

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY hack/constraints.txt ./
COPY operator ./operator
# A local project cannot carry a version pin; its dependencies are installed at the versions
# the test suite ran on (hack/constraints.txt), so an image rebuilt from the same commit later
# holds the same kopf, aiohttp and prometheus-client.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --prefix=/install --constraint constraints.txt ".[operator]" \
 && python -m compileall -q /install

FROM ${PYTHON_IMAGE}
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
COPY --from=build /install /usr/local
# 65532: the conventional "nonroot" uid; no shell login, no home to write to.
USER 65532:65532
ENTRYPOINT ["python", "-m", "agentrl.controller"]
