# fdkit: `make demo` and `make test` are the two commands; `make help` lists the rest.
# A fresh machine needs only python3, cargo and gcc: everything else is installed here.

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP_DEPS := $(VENV)/.deps-installed
STAMP_BUILD := $(VENV)/.fdkit-built
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(PATH)
RUST_SOURCES := $(shell find crates -name '*.rs' -o -name Cargo.toml 2>/dev/null) Cargo.toml

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP_DEPS): requirements-dev.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

$(STAMP_BUILD): $(STAMP_DEPS) $(RUST_SOURCES) pyproject.toml
	$(VENV)/bin/maturin develop --release --quiet
	touch $@

.PHONY: setup
setup: $(STAMP_BUILD) ## create .venv, install tools, build the extension (release)

.PHONY: demo
demo: setup ## set up, then a short tour of every capability against its stdlib baseline
	$(VENV)/bin/fdkit bench --quick

.PHONY: lint
lint: setup ## cargo fmt --check, clippy -D warnings, ruff, mypy stubtest
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --release -- -D warnings
	$(VENV)/bin/ruff check python tests bench
	$(VENV)/bin/ruff format --check python tests bench
	$(PY) -m mypy.stubtest fdkit._fdkit --allowlist stubtest-allowlist.txt
	$(PY) -m mypy python/fdkit

.PHONY: test
test: lint ## set up, lint, then cargo test (core) and pytest (Python API and CLI)
	cargo test --workspace --release
	$(PY) -m pytest

.PHONY: bench
bench: setup ## the full benchmarks (minutes); BENCH="accept" to pick, JSON=1 for JSON
	$(VENV)/bin/fdkit bench $(BENCH) $(if $(JSON),--json)

.PHONY: fmt
fmt: ## format Rust and Python sources in place
	cargo fmt --all
	$(VENV)/bin/ruff format python tests bench
	$(VENV)/bin/ruff check --fix python tests bench

.PHONY: clean
clean: ## remove build outputs and the virtualenv
	cargo clean
	rm -rf $(VENV)
