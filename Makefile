# `make demo` and `make test` are the README's two commands; both install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

.PHONY: install demo test lint
install: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/spex demo

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest

.PHONY: grid test-slow
grid: $(BIN)/.installed
	$(BIN)/spex bench --grid --grid-questions 64

test-slow: $(BIN)/.installed
	$(BIN)/python -m pytest -m slow
