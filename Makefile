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

$(STAMP_DEPS): requirements-dev.txt requirements-test.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

# Cargo.toml's `fast` profile builds everything but the wheels: release code (opt-level 3, no
# debug assertions) without LTO, in 16 codegen units. The release profile's fat LTO and single
# codegen unit are for the wheels only (`make wheels`), whose suite `make test-wheels` runs.
CARGO_PROFILE := --profile fast

$(STAMP_BUILD): $(STAMP_DEPS) $(RUST_SOURCES) pyproject.toml
	$(VENV)/bin/maturin develop $(CARGO_PROFILE) --quiet $(if $(JSON),>&2)
	touch $@

.PHONY: setup
setup: $(STAMP_BUILD) ## create .venv, install tools, build the extension (optimised, no LTO)

.PHONY: demo
demo: setup bench-tools bench-deps ## set up, then a short tour of every capability against its stdlib baseline
	@$(PY) -m bench --quick

# The serve bench's peers: wrk (the load), nginx and h2o (the baselines), Debian packages.
# Installed here, by the project's own setup, never by `fdkit bench`. Only what is missing, with
# apt-get as root or through passwordless sudo; otherwise the command to run is printed and the
# bench skips those rows. Never fails: `make test` does not need these.
BENCH_TOOLS := wrk:wrk nginx:nginx h2o:h2o
.PHONY: bench-tools
bench-tools: ## install wrk, nginx and h2o for `fdkit bench serve` when missing (apt-get)
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

# The aio bench's contenders (uvloop, rloop, uvicorn, httptools), pinned in requirements-bench.txt,
# installed into .venv for `make bench` and `make demo` only: `make test` does not need them (the
# bench skips a loop it cannot import, and says which command adds it).
STAMP_BENCH_DEPS := $(VENV)/.bench-deps-installed
$(STAMP_BENCH_DEPS): $(STAMP_DEPS) requirements-bench.txt
	$(PY) -m pip install --quiet -r requirements-bench.txt $(if $(JSON),>&2)
	touch $@

.PHONY: bench-deps
bench-deps: $(STAMP_BENCH_DEPS) ## install the aio bench's contenders (uvloop, rloop, uvicorn) into .venv

.PHONY: lint
lint: setup ## cargo fmt --check, clippy -D warnings, cargo doc -D warnings, ruff, mypy stubtest
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets $(CARGO_PROFILE) -- -D warnings
	RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps $(CARGO_PROFILE) --quiet
	$(VENV)/bin/ruff check python tests bench examples
	$(VENV)/bin/ruff format --check python tests bench examples
	$(PY) -m mypy.stubtest fdkit._fdkit --allowlist stubtest-allowlist.txt
	$(PY) -m mypy python/fdkit bench tests examples

# On a machine with io_uring, `make test` sets FDKIT_REQUIRE_URING=1: a test that would skip for
# lack of io_uring fails instead, so io_uring lost here (seccomp, a sysctl) cannot pass as green.
# Without io_uring it stays unset and those tests skip, saying so (SKIPPED lines in both suites).
HAVE_URING = $(shell $(PY) -c 'import fdkit.uring as u; print(int(u.available()[0]))' 2>/dev/null)
REQUIRE_URING = $(if $(filter 1,$(HAVE_URING)),FDKIT_REQUIRE_URING=1)

# pytest runs in PYTEST_JOBS processes (pytest-xdist; each test file stays in one process, so
# its module fixtures hold), then the tests marked `serial` (CPU budgets, timing, pinned CPUs)
# alone in one process, where no other test competes for the CPU they measure.
PYTEST_JOBS ?= 2
PYTEST_PARALLEL = $(PY) -m pytest -n $(PYTEST_JOBS) --dist loadfile
PYTEST_SERIAL = $(PY) -m pytest -m serial

.PHONY: test
test: lint ## set up, lint, then cargo test (core) and pytest (Python API and CLI)
	$(REQUIRE_URING) cargo test --workspace $(CARGO_PROFILE)
	$(REQUIRE_URING) $(PYTEST_PARALLEL) -m "not serial"
	$(REQUIRE_URING) $(PYTEST_SERIAL)

# The edit loop, a minute or two: the extension rebuilt if a source changed, the core's Rust
# tests, and the Python tests not marked slow or serial, in parallel. `make test` before a push.
.PHONY: test-fast
test-fast: setup ## the edit loop: build, cargo test of the core, pytest -n 2 without slow tests
	$(REQUIRE_URING) cargo test -p fdkit $(CARGO_PROFILE)
	$(REQUIRE_URING) $(PYTEST_PARALLEL) -m "not slow and not serial"

# The harness is bench/ of this source tree (`python -m bench` from here; it is not in the
# wheel). `make bench JSON=1` prints the JSON document alone on stdout: make echoes no command
# then, and what the steps before it say (bench-tools, a rebuild by maturin) goes to stderr.
.PHONY: bench
bench: setup bench-tools bench-deps ## the full benchmarks (minutes); BENCH="accept" to pick, JSON=1 for JSON
	@$(PY) -m bench $(BENCH) $(if $(JSON),--json)

# Other projects' own test suites on fdkit's loop (issue 16's proof): uvloop 0.23.0's, anyio
# 4.16.0's and aiohttp 3.14.5's tests, from their PyPI sdists (downloaded into .peer/ on the first
# run, with a venv per suite; none of their code is in this repository), each on asyncio's loop
# and on fdkit's with both engines. The report lists every test that passes on asyncio's loop
# and not on fdkit's; a hang is reported as one (per-test timeout, then a watchdog). It downloads,
# so it is not part of `make test`. PEER="--suite anyio --loop epoll -j 2" to narrow; JSON=1.
.PHONY: peer-tests
peer-tests: setup ## other projects' suites (uvloop, anyio, aiohttp) on asyncio's loop and fdkit's: what differs
	@$(PY) -m tests.peer_suites $(PEER) $(if $(JSON),--json)

ifneq ($(JSON),)
.SILENT:
endif

# --- release wheels --------------------------------------------------------------------------
# One wheel per CPython in WHEEL_PYTHONS, stripped, manylinux2014 (glibc 2.17): zig (the ziglang
# package, requirements-wheels.txt) is the C compiler and linker, so this machine's newer glibc
# does not leak into the wheel; auditwheel checks each one. Each interpreter is pyenv's newest
# 3.X.* or python3.X on PATH, whichever runs first. `make wheels WHEEL_PYTHONS=3.12` builds one.
# zig's own libunwind must not replace libgcc_s: CPython (< 3.14) ends a daemon thread that wants
# the GIL back during finalization with pthread_exit, whose forced unwind runs in glibc's
# libgcc_s through our Rust frames; their personality routine, resolved against a second,
# static unwinder, crashed the process (SIGSEGV at exit). The wheel links the system
# libgcc_s.so.1, which every manylinux policy allows.
LIBGCC_S := $(shell $${CC:-cc} -print-file-name=libgcc_s.so.1 2>/dev/null)
WHEEL_PYTHONS := 3.11 3.12 3.13
WHEEL_COMPAT := manylinux2014
WHEEL_DIR := target/wheels
STAMP_WHEEL_TOOLS := $(VENV)/.wheel-tools-installed
WHEEL_STAMPS := $(foreach v,$(WHEEL_PYTHONS),$(WHEEL_DIR)/.built-$(v))
WHEEL_INPUTS := $(RUST_SOURCES) Cargo.lock pyproject.toml README.md LICENSE-MIT LICENSE-APACHE Makefile \
	$(shell find python -name '*.py' -o -name '*.pyi' -o -name py.typed 2>/dev/null)
# The tree as the tests see it from an installed wheel: what tests/ reads beside itself.
WHEEL_TEST_FILES := tests examples bench pyproject.toml requirements-bench.txt
# Sets $$py to a working, GIL-enabled CPython $$ver, or fails naming what it looked for.
define FIND_PYTHON
py=""; \
for c in $$(ls -d "$${PYENV_ROOT:-$$HOME/.pyenv}"/versions/$$ver.*/bin/python$$ver 2>/dev/null | sort -rV) \
         $$(type -ap python$$ver); do \
  if "$$c" -c 'import sys, sysconfig; raise SystemExit("%d.%d" % sys.version_info[:2] != sys.argv[1] or bool(sysconfig.get_config_var("Py_GIL_DISABLED")))' "$$ver" 2>/dev/null; \
  then py=$$c; break; fi; \
done; \
if [ -z "$$py" ]; then echo "no CPython $$ver here (looked for pyenv's versions/$$ver.* and python$$ver on PATH)" >&2; exit 1; fi
endef

$(STAMP_WHEEL_TOOLS): $(STAMP_DEPS) requirements-wheels.txt
	$(PY) -m pip install --quiet -r requirements-wheels.txt
	touch $@

$(WHEEL_DIR)/.built-%: $(STAMP_WHEEL_TOOLS) $(WHEEL_INPUTS)
	@set -eo pipefail; ver=$*; tag=cp$(subst .,,$*); $(FIND_PYTHON); \
	echo "wheels: CPython $$ver ($$py)"; \
	case "$(LIBGCC_S)" in /*) ;; *) echo "wheels: no libgcc_s.so.1 (from \`cc -print-file-name\`)" >&2; exit 1;; esac; \
	mkdir -p $(WHEEL_DIR); rm -f $(WHEEL_DIR)/fdkit-*-$$tag-$$tag-*.whl; \
	RUSTFLAGS="$${RUSTFLAGS:-} -C link-arg=$(LIBGCC_S)" \
	$(VENV)/bin/maturin build --release --strip --zig --compatibility $(WHEEL_COMPAT) \
	  --interpreter "$$py" --out $(WHEEL_DIR); \
	whl=$$(ls $(WHEEL_DIR)/fdkit-*-$$tag-$$tag-*.whl); \
	$(VENV)/bin/auditwheel show "$$whl" | tee $(WHEEL_DIR)/auditwheel-$$tag.txt; \
	tr -s ' \n' '  ' < $(WHEEL_DIR)/auditwheel-$$tag.txt \
	  | grep -Eq 'consistent with the following platform tag: "manylinux_2_(17|28)_' \
	  || { echo "wheels: $$whl is not manylinux2014 or manylinux_2_28" >&2; exit 1; }
	@touch $@

.PHONY: wheels
wheels: $(WHEEL_STAMPS) ## release wheels for CPython 3.11, 3.12, 3.13 (manylinux2014, stripped) in target/wheels
	@ls -l $(WHEEL_DIR)/*.whl

.PHONY: test-wheels
test-wheels: $(WHEEL_STAMPS) ## each wheel in a fresh venv of its Python, outside the tree: pytest on the installed fdkit
	@set -o pipefail; failed=""; tmp=""; trap 'rm -rf "$$tmp"' EXIT; \
	for ver in $(WHEEL_PYTHONS); do \
	  tag=cp$$(echo $$ver | tr -d .); $(FIND_PYTHON); \
	  whl=$$(ls $(WHEEL_DIR)/fdkit-*-$$tag-$$tag-*.whl); \
	  tmp=$$(mktemp -d -t fdkit-wheel-$$tag.XXXXXX); chmod 755 "$$tmp"; \
	  echo "test-wheels: $$whl in $$tmp/venv ($$py)"; \
	  "$$py" -m venv "$$tmp/venv" \
	  && "$$tmp/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
	       -r requirements-test.txt "$$whl" \
	  && cp -r $(wildcard $(WHEEL_TEST_FILES)) "$$tmp/" \
	  && ( cd "$$tmp" && env -u VIRTUAL_ENV -u PYTHONPATH \
	       PATH="$$tmp/venv/bin:$(subst $(abspath $(VENV))/bin:,,$(PATH))" \
	       venv/bin/python -m pytest -p no:cacheprovider -n $(PYTEST_JOBS) --dist loadfile \
	         -m "not serial" $(PYTEST_ARGS) \
	       && venv/bin/python -m pytest -p no:cacheprovider -m serial $(PYTEST_ARGS) ) \
	  || failed="$$failed $$ver"; \
	  rm -rf "$$tmp"; \
	done; \
	if [ -n "$$failed" ]; then echo "test-wheels: failed for CPython$$failed" >&2; exit 1; fi

.PHONY: sdist
sdist: $(STAMP_DEPS) ## the source distribution (crates, package, tests, examples, licences) in target/wheels
	$(VENV)/bin/maturin sdist --out $(WHEEL_DIR)

.PHONY: fmt
fmt: ## format Rust and Python sources in place
	cargo fmt --all
	$(VENV)/bin/ruff format python tests bench examples
	$(VENV)/bin/ruff check --fix python tests bench examples

.PHONY: clean
clean: ## remove build outputs and the virtualenv
	cargo clean
	rm -rf $(VENV)
