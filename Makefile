# Two commands on a fresh machine: `make demo` and `make test`.
# Each creates the virtual environment it needs.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: demo test lint check bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/berth demo

test: $(BIN)/.installed
	$(BIN)/pytest -q

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/mypy schemas ledger projections consumers placement berth bench tests

check: lint test

bench: $(BIN)/.installed
	$(BIN)/python -m bench.projector --kafka auto
	$(BIN)/python -m bench.ledger --kafka auto

clean:
	rm -rf $(VENV) berth-demo-data .pytest_cache .mypy_cache .ruff_cache
