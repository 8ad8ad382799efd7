# The two commands a new machine needs: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck unit install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The local single-user gateway: the example upstream servers (no network, no keys), the
# embedded SQLite default, streamable HTTP on loopback. examples/pml.toml names its servers
# by paths relative to its own folder, so it works from any directory.
RUN_CONFIG ?= examples/pml.toml
RUN_HTTP ?= 127.0.0.1:8765

run: $(STAMP)
	bash scripts/e2e-deps.sh >/dev/null
	$(BIN)/pml --config $(RUN_CONFIG) db upgrade
	@$(BIN)/python scripts/connect_info.py --config $(RUN_CONFIG) --http $(RUN_HTTP)
	exec $(BIN)/pml --config $(RUN_CONFIG) serve --http $(RUN_HTTP)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/pyright

# The suite runs on one worker per core (pytest-xdist; each test has its own databases, ports
# and folders): 1.4 to 2 times as fast as one process. TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= auto

unit: $(STAMP)
	$(BIN)/pytest -q -n $(TEST_WORKERS)

test: lint typecheck unit

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
