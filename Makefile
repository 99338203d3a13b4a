# holdback: every target does its own set-up. `make run` and `make test` are the two commands.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PGBIN ?= $(firstword $(wildcard /usr/lib/postgresql/*/bin))
APT_PACKAGES := chromium postgresql

.PHONY: help run demo test lint typecheck pytest bench bench-server sysdeps clean

help:
	@echo "make run           start holdback on embedded SQLite with the offline demo model"
	@echo "make test          install everything the tests need, then lint, type-check and test"
	@echo "make bench         micro-benchmarks of the core (restorer, detectors, guard) and the store per turn"
	@echo "make bench-server  load, latency and soak benchmarks of the whole server"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# `make run PORT=8001`. `make demo` (the leak demonstration) has its own port and data
# directory, so it runs beside `make run`: `make demo DEMO_PORT=8002 DEMO_DATA_DIR=/tmp/x`.
PORT ?= $(or $(HOLDBACK_PORT),8000)
MODEL ?= demo
DEMO_PORT ?= 8001
DEMO_DATA_DIR ?= $(or $(XDG_DATA_HOME),$(HOME)/.local/share)/holdback-demo

run: $(STAMP)
	$(BIN)/holdback serve --model $(MODEL) --port $(PORT)

demo: $(STAMP)
	$(BIN)/holdback demo --model demo --port $(DEMO_PORT) --data-dir $(DEMO_DATA_DIR)

# Chromium (browser tests) and PostgreSQL (persistence tests) come from Debian's packages.
sysdeps:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing from Debian:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "WARNING: cannot install$$missing (need root and apt-get); those tests will be skipped"; \
	  fi; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check server tests bench
	$(BIN)/ruff format --check server tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

# pytest exits 5 when it collected no test: that is a failure here, never a silent pass.
pytest: $(STAMP) sysdeps
	@$(BIN)/pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing on purpose"; exit 1; fi; \
	exit $$rc

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python bench/run.py
	$(BIN)/python bench/transport_bench.py
	$(BIN)/python bench/store_bench.py

# Options go to bench/server_load.py: `make bench-server ARGS="--workload moderation
# --servers relay-aiohttp"`; `make bench-server PROCESSES=1,2` is issue 20's `--processes 1,2`.
ARGS ?=
PROCESSES ?=
bench-server: $(STAMP)
	$(BIN)/python bench/server_load.py $(if $(PROCESSES),--processes $(PROCESSES)) $(ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
