# The project's two commands: `make demo` and `make test`. Each installs what it runs, into .venv:
# `make demo` the [demo] extra (guard, trail, sidecar, DuckDB, dashboard; no test tools),
# `make test` the [dev] extra (every layer and the test tools).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_STAMP := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck bench clean system-deps real-servers

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[demo]'
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP) $(DEMO_STAMP)

# Debian packages the tests drive for real: the dashboard's browser test runs Debian's Chromium
# headless through Playwright (no browser download); the Redis stores run against a real
# redis-server on a free local port. Installed only when absent; a test that needs a missing one
# fails with instructions, it is never skipped.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
system-deps:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages for the tests:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# The published MCP servers, the conformance suite and Node 22 that tests/gateway/real drives,
# from npm and PyPI into .cache/mcp-servers (ignored by git; the tests install it on first use).
real-servers: $(STAMP)
	$(BIN)/python -m tests.gateway.real.install

demo: $(DEMO_STAMP)
	$(BIN)/callgate demo

test: $(STAMP) system-deps
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/guard_overhead.py
	$(BIN)/python bench/telemetry_overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
