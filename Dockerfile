# queuepilot: one image for both deployables (entrypoint `queuepilot`):
#   queuepilot exporter ...     the GPU node exporter (DaemonSet)
#   queuepilot controller ...   the controller + queue-name webhook (Deployment)
# Build from the repository root (docs/install.md has the push and multi-arch steps):
#   docker build -t ghcr.io/queuepilot/queuepilot:0.1.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 -t REGISTRY/queuepilot:TAG --push .
# Only the runtime packages go in: no simulator, no `sim` or `dev` extra (numpy, matplotlib, ray).
# The gRPC stubs (exporter/podresources/api_pb2*.py) are committed, so no protoc runs here.
# NVML (libnvidia-ml.so.1) is not in the image: the NVIDIA container runtime injects the host
# driver's library into the exporter pod (NVIDIA_VISIBLE_DEVICES / runtimeClassName: nvidia).

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/queuepilot
COPY pyproject.toml README.md ./
COPY queuepilot/ queuepilot/
COPY servicekit/ servicekit/
COPY exporter/ exporter/
COPY autoscaler/ autoscaler/
COPY dashboards/ dashboards/
COPY alerts/ alerts/
COPY report/ report/
# `pip install .` without extras: the image never carries the simulator's numpy/matplotlib
RUN /opt/queuepilot/bin/pip install . \
 && /opt/queuepilot/bin/python -m compileall -q /opt/queuepilot/lib \
 && /opt/queuepilot/bin/queuepilot --version \
 && ! /opt/queuepilot/bin/python -c "import numpy" 2>/dev/null

FROM python:3.11-slim
LABEL org.opencontainers.image.title="queuepilot" \
      org.opencontainers.image.description="GPU-, queue- and Ray-aware admission and autoscaling for Kueue + KubeRay" \
      org.opencontainers.image.source="https://github.com/queuepilot/queuepilot" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed non-root identity (65532, the distroless "nonroot" id); the chart runs the controller as it.
# The exporter pod overrides it with uid 0 only to reach the kubelet's root-owned PodResources
# socket, with every capability dropped (docs/security.md).
RUN groupadd --system --gid 65532 queuepilot \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin queuepilot
COPY --from=build /opt/queuepilot /opt/queuepilot
ENV PATH=/opt/queuepilot/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
WORKDIR /tmp
# 9400 exporter /metrics /healthz; 8080 controller /metrics /healthz /readyz; 9443 webhook (TLS)
EXPOSE 9400 8080 9443
ENTRYPOINT ["queuepilot"]
CMD ["--help"]
