# Two commands on a fresh machine: `make demo` and `make test`.
# Each creates the virtual environment it needs.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: demo test lint check bench sim interpreted clean

# The decision core compiled with mypyc and the ranking kernel from C
# (berth/compile.py says why), again whenever one of their sources changes;
# without a C compiler the build says so and the sources run interpreted.
COMPILED := $(BIN)/.compiled

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

$(COMPILED): $(BIN)/.installed berth/compile.py scheduling/_ranked.c $(shell find projections -name '*.py')
	$(BIN)/python -m berth.compile build
	touch $@

demo: $(COMPILED)
	$(BIN)/berth demo

# TEST_WORKERS pytest processes share the tests out (pytest-xdist); a long
# test leaves the others to the idle worker (worksteal). The tests marked
# `alone` (timing-bound process groups) run afterwards, one at a time.
TEST_WORKERS ?= 2
test: $(COMPILED)
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist worksteal -m "not alone"
	$(BIN)/pytest -q -m alone

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/mypy schemas ledger projections consumers scheduling berth sim bench tests

check: lint test

bench: $(COMPILED)
	$(BIN)/python -m bench.projector --kafka auto
	$(BIN)/python -m bench.ledger --kafka auto
	$(BIN)/python -m bench.worker --kafka auto

# the simulator (docs/simulation.md): new random seeds for SIM_BUDGET_S seconds,
# SIM_JOBS runs at once (one process each)
SIM_BUDGET_S ?= 300
SIM_STEPS ?= 3000
SIM_JOBS ?= 2
sim: $(COMPILED)
	$(BIN)/python -m sim --budget-s $(SIM_BUDGET_S) --steps $(SIM_STEPS) --jobs $(SIM_JOBS)

# the same code, run by the interpreter (until the next make demo/test/bench)
interpreted: $(BIN)/.installed
	$(BIN)/python -m berth.compile remove
	rm -f $(COMPILED)

clean:
	[ ! -x $(BIN)/python ] || $(BIN)/python -m berth.compile remove
	rm -rf $(VENV) build berth-demo-data .pytest_cache .mypy_cache .ruff_cache
