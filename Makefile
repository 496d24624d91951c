# `make demo` and `make test` are the README's two commands; both install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The folders that install as subpackages of `spex` (pyproject.toml's package-dir).
PACKAGES := proto shared services bench data

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

.PHONY: install demo test lint
install: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/spex demo

# mypy cannot see through the editable install's package-dir mapping: give it a tree of links.
lint: $(BIN)/.installed
	$(BIN)/ruff check .
	rm -rf build/typecheck && mkdir -p build/typecheck/spex
	for p in $(PACKAGES); do ln -s ../../../$$p build/typecheck/spex/$$p; done
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint
	$(BIN)/python -m pytest

.PHONY: grid test-slow
grid: $(BIN)/.installed
	$(BIN)/spex bench --grid --grid-questions 64

test-slow: $(BIN)/.installed
	$(BIN)/python -m pytest -m slow
