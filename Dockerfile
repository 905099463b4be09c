# syntax=docker/dockerfile:1
# One image, two entry points: `python -m helm_agl` and `python -m tofu_agl` (the Helm chart picks one per
# Deployment). Build: docker build -t ghcr.io/cozystack/agl-parallel:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim

# Stage 1: resolve the pinned dependencies of pyproject.toml into wheels (all of them ship binary wheels,
# so no compiler is involved) and build the project's own wheel.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml ./
COPY shared/ shared/
COPY helm_agl/ helm_agl/
COPY tofu_agl/ tofu_agl/
COPY deploy/local/localcluster/ deploy/local/localcluster/
RUN pip wheel --wheel-dir /wheels .

# Stage 2: only the interpreter and the installed wheels; pip, setuptools and wheel are removed afterwards
# so nothing that builds or installs software is left in the image.
FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    HOME=/tmp
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels cozystack-agl-parallel \
    && pip uninstall --yes pip setuptools wheel \
    && rm -rf /root/.cache
# A fixed non-root uid/gid (the chart's securityContext runs as 65532 and mounts the root file system
# read-only; bytecode was compiled at install time, /tmp is an emptyDir).
USER 65532:65532
WORKDIR /tmp
EXPOSE 8443
CMD ["python", "-m", "helm_agl", "--help"]
