# ferry's worker image: one image for every part of deploy/k8s/ (the Prefect worker, the flow-run pods it starts,
# the Dask scheduler and its workers). From the repository root (docker build takes the same flags):
#
#   buildah bud -f deploy/worker.Dockerfile --build-arg BASE=python:3.11-slim-bookworm -t REGISTRY/ferry-worker:TAG .
#
# BASE: an image with CPython 3.11 at 3.11.5 or later (the lock, constraints.txt, is resolved for 3.11; Debian 12's
# own 3.11.2 is too old for it), its venv module, a POSIX sh and useradd: the official python:3.11 images, or a CUDA
# image with such a Python added. Name it by digest for a build you can repeat.
ARG BASE=docker.io/library/python:3.11-slim-bookworm
FROM ${BASE}

# What the wheel is built from, no more (.dockerignore keeps the rest of the checkout out of the build context).
COPY pyproject.toml README.md constraints.txt /tmp/ferry/
COPY ferry /tmp/ferry/ferry
COPY connectors /tmp/ferry/connectors
COPY checks /tmp/ferry/checks
COPY flows /tmp/ferry/flows

# pip's configuration file, when the build names one: an index mirror, or a wheelhouse mounted for a build without
# network (deploy/README.md). Empty, pip reads its usual places; nothing of it is kept in the image.
ARG PIP_CONFIG_FILE=
# A virtual environment of its own leaves the base's Python as it came. Every version is the one ferry's test suite
# last passed with (constraints.txt); the extras: Dask for data_sync's shards, the Prefect worker for a Kubernetes
# work pool.
RUN python3 -m venv /opt/ferry \
 && /opt/ferry/bin/pip install --no-cache-dir -c /tmp/ferry/constraints.txt '/tmp/ferry[dask,kubernetes-worker]' \
 && rm -rf /tmp/ferry

# Not root. The user is named by number so that Kubernetes' runAsNonRoot can check it without reading /etc/passwd.
RUN useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin ferry
USER 10001:10001
WORKDIR /home/ferry
# ferry, prefect and dask on PATH; Python's output unbuffered, so that `kubectl logs` shows lines as they come.
ENV PATH=/opt/ferry/bin:$PATH \
    PYTHONUNBUFFERED=1
CMD ["ferry", "--help"]
