# The GPU image: SGLang with the spex package installed beside it, so a GPU pod's generator (or
# scorer) container and its SGLang server can come from one image and one pull. Build from the
# repository root:
#   docker build -f docker/gpu.Dockerfile -t spex-gpu .
#
# The node that runs it needs the NVIDIA driver and the NVIDIA container toolkit (Docker:
# `--gpus` / compose device reservations); on Kubernetes also the NVIDIA device plugin, which
# advertises nvidia.com/gpu. The CUDA version of the SGLang tag must be one the driver supports.
#
# An assumption to pin: the SGLang release the sglang backend was written against (0.5.23).
# k8s/overlays/gpu-sglang and compose/docker-compose.yml name the same tag. spex needs
# Python >= 3.11 from this image's python3.
ARG SGLANG_IMAGE=lmsysorg/sglang:v0.5.23
FROM ${SGLANG_IMAGE}
WORKDIR /opt/spex
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY search ./search
COPY shared ./shared
COPY services ./services
COPY bench ./bench
COPY cli ./cli
COPY data ./data
# Into SGLang's own environment; the import check fails the build if spex's requirements
# replaced a package SGLang needs.
RUN pip install --no-cache-dir . && python3 -c "import sglang, spex.cli.main"
ENTRYPOINT ["spex"]
