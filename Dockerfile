# syntax=docker/dockerfile:1
# One image, two entry points: `python -m helm_agl` and `python -m tofu_agl` (the Helm chart picks one per
# Deployment). Build: docker build -t ghcr.io/cozystack/agl-parallel:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim

# Stage 1: build the project's own wheel from its three packages; localcluster (deploy/local, development
# only) is not in the build context, so the wheel holds helm_agl, tofu_agl and shared only.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml ./
COPY shared/ shared/
COPY helm_agl/ helm_agl/
COPY tofu_agl/ tofu_agl/
RUN pip wheel --no-deps --wheel-dir /wheels .

# Stage 2: only the interpreter and the installed wheels; pip, setuptools and wheel are removed afterwards
# so nothing that builds or installs software is left in the image.
FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    HOME=/tmp
# The dependencies come from requirements.lock (every version pinned, every file's sha256 checked, binary
# wheels only, so no compiler is involved; `nox -s lock` regenerates it), then the project's wheel without
# dependencies; pip check proves the lock is complete.
RUN --mount=type=bind,source=requirements.lock,target=/requirements.lock \
    --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --require-hashes --no-deps --only-binary=:all: -r /requirements.lock \
    && pip install --no-index --no-deps /wheels/cozystack_agl_parallel-*.whl \
    && pip check \
    && pip uninstall --yes pip setuptools wheel \
    && rm -rf /root/.cache
# A fixed non-root uid/gid (the chart's securityContext runs as 65532 and mounts the root file system
# read-only; bytecode was compiled at install time, /tmp is an emptyDir).
USER 65532:65532
WORKDIR /tmp
EXPOSE 8443
CMD ["python", "-m", "helm_agl", "--help"]
