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

# Until the gateway (`pml serve`) lands, `make run` sets up the embedded database and shows
# the registry that exists today.
run: $(STAMP)
	$(BIN)/pml db upgrade
	$(BIN)/pml status
	$(BIN)/pml cap lookup mcp:filesystem
	@echo
	@echo "PML's storage and capability registry are ready (see docs/registry.md)."
	@echo "The MCP gateway itself (pml serve) is not built yet, so there is nothing to"
	@echo "connect Claude Code or Cursor to today. Try: $(BIN)/pml cap --help"

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/pyright

unit: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck unit

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
