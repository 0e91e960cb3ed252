# CPU image of the Kronos portfolio service (gateway + predictor replicas on CPU).
#   docker build -t ghcr.io/example/kronos-portfolio:cpu .
#   docker run --rm -p 8000:8000 ghcr.io/example/kronos-portfolio:cpu
# The GPU image the KubeRay manifest names is Dockerfile.cuda; see deploy/README.md.
FROM python:3.11-slim

ARG RAY_VERSION=2.60.0
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 \
    PIP_CONSTRAINT=/etc/kronos-constraints.txt
# wget: KubeRay's probes exec it inside Ray pods
RUN apt-get update && apt-get install -y --no-install-recommends wget && rm -rf /var/lib/apt/lists/* \
    && echo "ray==${RAY_VERSION}" > /etc/kronos-constraints.txt

WORKDIR /app
# torch's CPU build first (PyPI's Linux wheel is the CUDA one); the README's command then finds it installed
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
COPY pyproject.toml README.md ./
COPY kronos_core ./kronos_core
COPY service ./service
# the tools that drive the service: kronos bench service, kronos loadtest, kronos soak
COPY loadtests ./loadtests
COPY deploy ./deploy
# the README's install command, verbatim
RUN pip install torch==2.13.0 -e '.[serve]' \
    && python -c "import kronos_core, service.app, ray; assert ray.__version__ == '${RAY_VERSION}'"

# a non-root user (uid/gid 1000, as the manifests' runAsUser): the code stays root's and
# read-only to it; Ray and the service write only under /tmp and the mounted volumes
RUN groupadd --gid 1000 kronos && useradd --uid 1000 --gid 1000 --create-home --shell /usr/sbin/nologin kronos
USER 1000:1000
# the bundled sample store is in the (read-only) code: its default ledger folder beside it would
# not be writable, so the ledger goes to the user's home (the manifests mount a volume instead)
ENV HOME=/home/kronos KRONOS_LEDGER_DIR=/home/kronos/ledger
EXPOSE 8000
# SIGTERM drains (new requests 503, in-flight ones finish within KRONOS_SHUTDOWN_GRACE_S), then exits 0
STOPSIGNAL SIGTERM
ENV KRONOS_HOST=0.0.0.0 KRONOS_DEVICE=cpu
CMD ["kronos", "serve"]
