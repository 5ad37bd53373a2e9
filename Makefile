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
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP_DEPS): requirements-dev.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

$(STAMP_BUILD): $(STAMP_DEPS) $(RUST_SOURCES) pyproject.toml
	$(VENV)/bin/maturin develop --release --quiet $(if $(JSON),>&2)
	touch $@

.PHONY: setup
setup: $(STAMP_BUILD) ## create .venv, install tools, build the extension (release)

.PHONY: demo
demo: setup bench-tools ## set up, then a short tour of every capability against its stdlib baseline
	@$(PY) -m bench --quick

# The serve bench's peers: wrk (the load) and nginx (the baseline), Debian packages. Installed
# here, by the project's own setup, never by `fdkit bench`. Only what is missing, with apt-get
# as root or through passwordless sudo; otherwise the command to run is printed and the bench
# skips those rows. Never fails: `make test` does not need these.
BENCH_TOOLS := wrk:wrk nginx:nginx
.PHONY: bench-tools
bench-tools: ## install wrk and nginx for `fdkit bench serve` when missing (apt-get)
	@$(if $(JSON),exec 1>&2;) missing=""; \
	for pair in $(BENCH_TOOLS); do \
	  tool=$${pair%%:*}; pkg=$${pair#*:}; \
	  PATH="$$PATH:/usr/sbin:/sbin" command -v $$tool >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "bench-tools: missing:$$missing (no apt-get here: install them with your package manager; until then fdkit bench skips their rows)"; \
	  exit 0; \
	fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo"; \
	else \
	  echo "bench-tools: missing:$$missing; to install them run: sudo apt-get install -y$$missing"; \
	  exit 0; \
	fi; \
	echo "bench-tools: installing$$missing (apt-get)"; \
	export DEBIAN_FRONTEND=noninteractive; \
	$$sudo apt-get install -y -qq --no-install-recommends $$missing >/dev/null 2>&1 \
	  || { $$sudo apt-get update -qq >/dev/null 2>&1 \
	       && $$sudo apt-get install -y -qq --no-install-recommends $$missing >/dev/null; } \
	  || echo "bench-tools: apt-get could not install$$missing; fdkit bench skips their rows"

.PHONY: lint
lint: setup ## cargo fmt --check, clippy -D warnings, ruff, mypy stubtest
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --release -- -D warnings
	$(VENV)/bin/ruff check python tests bench
	$(VENV)/bin/ruff format --check python tests bench
	$(PY) -m mypy.stubtest fdkit._fdkit --allowlist stubtest-allowlist.txt
	$(PY) -m mypy python/fdkit bench

# On a machine with io_uring, `make test` sets FDKIT_REQUIRE_URING=1: a test that would skip for
# lack of io_uring fails instead, so io_uring lost here (seccomp, a sysctl) cannot pass as green.
# Without io_uring it stays unset and those tests skip, saying so (SKIPPED lines in both suites).
HAVE_URING = $(shell $(PY) -c 'import fdkit.uring as u; print(int(u.available()[0]))' 2>/dev/null)
REQUIRE_URING = $(if $(filter 1,$(HAVE_URING)),FDKIT_REQUIRE_URING=1)

.PHONY: test
test: lint ## set up, lint, then cargo test (core) and pytest (Python API and CLI)
	$(REQUIRE_URING) cargo test --workspace --release
	$(REQUIRE_URING) $(PY) -m pytest

# The harness is bench/ of this source tree (`python -m bench` from here; it is not in the
# wheel). `make bench JSON=1` prints the JSON document alone on stdout: make echoes no command
# then, and what the steps before it say (bench-tools, a rebuild by maturin) goes to stderr.
.PHONY: bench
bench: setup bench-tools ## the full benchmarks (minutes); BENCH="accept" to pick, JSON=1 for JSON
	@$(PY) -m bench $(BENCH) $(if $(JSON),--json)

ifneq ($(JSON),)
.SILENT:
endif

.PHONY: fmt
fmt: ## format Rust and Python sources in place
	cargo fmt --all
	$(VENV)/bin/ruff format python tests bench
	$(VENV)/bin/ruff check --fix python tests bench

.PHONY: clean
clean: ## remove build outputs and the virtualenv
	cargo clean
	rm -rf $(VENV)
