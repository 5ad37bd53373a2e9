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
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' \
	  '{ name[NR] = $$1; text[NR] = $$2; if (length($$1) > w) w = length($$1) } \
	   END { for (i = 1; i <= NR; i++) printf "  make %-*s  %s\n", w, name[i], text[i] }'

$(STAMP_DEPS): requirements-dev.txt requirements-test.txt requirements-docs.txt requirements-uvicorn-0.35.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps --upgrade --target $(VENV)/uvicorn-0.35 -r requirements-uvicorn-0.35.txt
	touch $@

# Cargo.toml's `fast` profile builds everything but the wheels: release code (opt-level 3, no
# debug assertions) without LTO, in 16 codegen units. The release profile's fat LTO and single
# codegen unit are for the wheels only (`make wheels`), whose suite `make test-wheels` runs.
CARGO_PROFILE := --profile fast

$(STAMP_BUILD): $(STAMP_DEPS) $(RUST_SOURCES) pyproject.toml
	rm -f $(STAMP_BUILD_RELEASE)
	$(VENV)/bin/maturin develop $(CARGO_PROFILE) --quiet $(if $(JSON),>&2)
	touch $@

.PHONY: setup
setup: $(STAMP_BUILD) ## create .venv, install tools, build the extension (optimised, no LTO)
	@if git rev-parse --git-dir >/dev/null 2>&1 && [ "$$(git config core.hooksPath)" != .githooks ]; then \
	  git config core.hooksPath .githooks \
	  && echo "setup: git hooks from .githooks (commit-msg refuses a subject over 72 characters)"; \
	fi

# `make bench` measures the extension as the wheels build it (the release profile, fat LTO),
# so its figures are those of what ships; `make demo`'s quick tour runs on the setup build. One
# extension is installed in .venv at a time: each stamp removes the other's.
STAMP_BUILD_RELEASE := $(VENV)/.fdkit-built-release
$(STAMP_BUILD_RELEASE): $(STAMP_DEPS) $(RUST_SOURCES) pyproject.toml
	rm -f $(STAMP_BUILD)
	$(VENV)/bin/maturin develop --release --quiet $(if $(JSON),>&2)
	touch $@

.PHONY: setup-release
setup-release: $(STAMP_BUILD_RELEASE) ## build the extension as the wheels do (fat LTO), for make bench

.PHONY: demo
demo: setup bench-tools bench-deps ## set up, then a tour: one line per capability against its best-known peer
	@$(PY) -m bench --tour

# The serve bench's peers: wrk (the load), nginx and h2o (the baselines), and valgrind (aio_anatomy
# counts instructions under callgrind), Debian packages.
# Installed here, by the project's own setup, never by the harness. Only what is missing, with
# apt-get as root or through passwordless sudo; otherwise the command to run is printed and the
# bench skips those rows. Never fails: `make test` does not need these.
BENCH_TOOLS := wrk:wrk nginx:nginx h2o:h2o valgrind:valgrind
.PHONY: bench-tools
bench-tools: ## install wrk, nginx, h2o (serve and aio benches) and valgrind (aio_anatomy) when missing (apt-get)
	@$(if $(JSON),exec 1>&2;) missing=""; \
	for pair in $(BENCH_TOOLS); do \
	  tool=$${pair%%:*}; pkg=$${pair#*:}; \
	  PATH="$$PATH:/usr/sbin:/sbin" command -v $$tool >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "bench-tools: missing:$$missing (no apt-get here: install them with your package manager; until then the bench skips their rows)"; \
	  exit 0; \
	fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo"; \
	else \
	  echo "bench-tools: missing:$$missing; to install them run: sudo apt-get install -y$$missing"; \
	  exit 0; \
	fi; \
	echo "bench-tools: installing$$missing with apt-get: Debian packages the benches and make demo's tour measure with (wrk drives the HTTP load; nginx and h2o are fdkit serve's peers; valgrind counts aio_anatomy's instructions). make demo BENCH_TOOLS= installs none, and their rows are skipped."; \
	export DEBIAN_FRONTEND=noninteractive; \
	$$sudo apt-get install -y -qq --no-install-recommends $$missing >/dev/null 2>&1 \
	  || { $$sudo apt-get update -qq >/dev/null 2>&1 \
	       && $$sudo apt-get install -y -qq --no-install-recommends $$missing >/dev/null; } \
	  || echo "bench-tools: apt-get could not install$$missing; the bench skips their rows"

# The tests' reference tools, Debian packages: socat (tests/test_cli_proxy_vs_socat.py runs the same relay
# through socat and through `fdkit proxy` and compares what a client sees) and strace
# (tests/test_aio_ring_wait.py counts the aio engines' wait syscalls). Installed the way
# bench-tools installs its own: only what is missing, with apt-get as root or through passwordless
# sudo, saying what and why first; otherwise the command to run is printed and those tests skip,
# saying so. Never fails: a machine without them still runs the rest of `make test`.
TEST_TOOLS := socat:socat strace:strace
.PHONY: test-tools
test-tools: ## install socat and strace (the proxy tests' reference, the aio syscall counts) when missing (apt-get)
	@missing=""; \
	for pair in $(TEST_TOOLS); do \
	  tool=$${pair%%:*}; pkg=$${pair#*:}; \
	  PATH="$$PATH:/usr/sbin:/sbin" command -v $$tool >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "test-tools: missing:$$missing (no apt-get here: install them with your package manager; until then the tests that compare with them skip)"; \
	  exit 0; \
	fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo"; \
	else \
	  echo "test-tools: missing:$$missing; to install them run: sudo apt-get install -y$$missing"; \
	  exit 0; \
	fi; \
	echo "test-tools: installing$$missing (apt-get): socat, the proxy tests' reference; strace, which counts the aio engines' syscalls"; \
	export DEBIAN_FRONTEND=noninteractive; \
	$$sudo apt-get install -y -qq --no-install-recommends $$missing >/dev/null 2>&1 \
	  || { $$sudo apt-get update -qq >/dev/null 2>&1 \
	       && $$sudo apt-get install -y -qq --no-install-recommends $$missing >/dev/null; } \
	  || echo "test-tools: apt-get could not install$$missing; the tests that compare with them skip"

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
test: lint docs test-tools ## set up, lint, build the docs, then cargo test (core) and pytest (Python API and CLI)
	$(REQUIRE_URING) cargo test --workspace $(CARGO_PROFILE)
	$(REQUIRE_URING) $(PYTEST_PARALLEL) -m "not serial"
	$(REQUIRE_URING) $(PYTEST_SERIAL)

# The edit loop, a minute or two: the extension rebuilt if a source changed, the core's Rust
# tests, and the Python tests not marked slow or serial, in parallel. `make test` before a push.
.PHONY: test-fast
test-fast: setup test-tools ## the edit loop: build, cargo test of the core, pytest -n 2 without slow tests
	$(REQUIRE_URING) cargo test -p fdkit $(CARGO_PROFILE)
	$(REQUIRE_URING) $(PYTEST_PARALLEL) -m "not slow and not serial"

# The differential fuzzer of fdkit.aio (tests/test_aio_differential.py), run long: FUZZ_EXAMPLES
# of hypothesis's programs per test (`make test` runs 40) on asyncio's loop and on fdkit's two
# engines, the three tests side by side. Examples that failed before are replayed first, from
# hypothesis's database in .hypothesis/.
FUZZ_EXAMPLES ?= 2000
.PHONY: fuzz-aio
fuzz-aio: setup ## the aio differential fuzzer, long run (FUZZ_EXAMPLES=2000 per test)
	$(REQUIRE_URING) FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -n 3 tests/test_aio_differential.py

# The site (docs/, mkdocs.yml) into site/: the API reference is read from the package and its
# stubs, so the extension is built first. --strict makes every warning (a broken link or anchor,
# a name the reference cannot find) an error; `make test` runs this, so the site cannot rot.
# NO_MKDOCS_2_WARNING silences mkdocs-material's notice about MkDocs 2.0, printed on every build.
.PHONY: docs
docs: setup ## build the documentation site into site/ (warnings are errors)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The harness is bench/ of this source tree (`python -m bench` from here; it is not in the
# wheel). `make bench JSON=1` prints the JSON document alone on stdout: make echoes no command
# then, and what the steps before it say (bench-tools, a rebuild by maturin) goes to stderr.
.PHONY: bench
bench: setup-release bench-tools bench-deps ## the full benchmarks (minutes); BENCH="accept" to pick, JSON=1 for JSON
	@$(PY) -m bench $(BENCH) $(if $(JSON),--json)

# Other projects' own test suites on fdkit's loop (beyond CPython's own): uvloop 0.23.0's, anyio
# 4.16.0's and aiohttp 3.14.5's tests, from their PyPI sdists (downloaded into .peer/ on the first
# run, with a venv per suite; none of their code is in this repository), each on asyncio's loop
# and on fdkit's with both engines. The report lists every test that passes on asyncio's loop
# and not on fdkit's; a hang is reported as one (per-test timeout, then a watchdog). It downloads,
# so it is not part of `make test`. PEER="--suite anyio --loop epoll -j 2" to narrow; JSON=1.
# The published figures (bench/figures.py): each run's JSON saved in docs/figures/, one file per
# bench, then the README's table of headline rows rewritten from the saved runs.
RUNS ?= 1
.PHONY: figures
figures: setup-release bench-tools bench-deps ## run BENCH (all when empty) RUNS times, save each run in docs/figures/, rewrite the README's figures
	@set -eo pipefail; for i in $$(seq 1 $(RUNS)); do \
	  $(PY) -m bench $(BENCH) --json > target/figures-run.json; \
	  $(PY) -m bench.figures save target/figures-run.json --command "make bench$(if $(BENCH), BENCH=\"$(BENCH)\") JSON=1"; \
	done; \
	$(PY) -m bench.figures readme

.PHONY: peer-tests
peer-tests: setup ## other projects' suites (uvloop, anyio, aiohttp) on asyncio's loop and fdkit's: what differs
	@$(PY) -m tests.peer_suites $(PEER) $(if $(JSON),--json)

ifneq ($(JSON),)
.SILENT:
endif

# --- release wheels --------------------------------------------------------------------------
# One wheel per CPython in WHEEL_PYTHONS, stripped, manylinux2014 (glibc 2.17): zig (the ziglang
# package, requirements-wheels.txt) is the C compiler and linker, so this machine's newer glibc
# does not leak into the wheel; auditwheel checks each one. The interpreter of 3.11-3.13 is
# pyenv's newest 3.X.* or python3.X on PATH, whichever runs first; those of ROOT_PYTHONS (3.14,
# 3.15) are Debian's, in the root PYROOT (below). `make wheels WHEEL_PYTHONS=3.12` builds one.
# zig's own libunwind must not replace libgcc_s: CPython (< 3.14) ends a daemon thread that wants
# the GIL back during finalization with pthread_exit, whose forced unwind runs in glibc's
# libgcc_s through our Rust frames; their personality routine, resolved against a second,
# static unwinder, crashed the process (SIGSEGV at exit). The wheel links the system
# libgcc_s.so.1, which every manylinux policy allows.
LIBGCC_S := $(shell $${CC:-cc} -print-file-name=libgcc_s.so.1 2>/dev/null)
WHEEL_PYTHONS := 3.11 3.12 3.13 3.14 3.15
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

# mmdebstrap unpacks Debian's packages into a directory of their own with an apt configuration
# of their own (the machine's is not touched): the root of CPython 3.14 and 3.15 and the aarch64
# sysroots. A Debian package, installed when missing, with apt-get as root or through
# passwordless sudo (as bench-tools installs wrk and nginx); otherwise the command is printed.
define NEED_MMDEBSTRAP
if ! command -v mmdebstrap >/dev/null 2>&1; then \
  if ! command -v apt-get >/dev/null 2>&1; then \
    echo "mmdebstrap is needed (a Debian package), and there is no apt-get here to install it" >&2; exit 1; \
  fi; \
  if [ "$$(id -u)" = 0 ]; then sudo=""; \
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo"; \
  else echo "mmdebstrap is needed; to install it run: sudo apt-get install mmdebstrap" >&2; exit 1; fi; \
  echo "mmdebstrap: installing it (apt-get): it unpacks Debian's packages for the CPythons this machine lacks"; \
  export DEBIAN_FRONTEND=noninteractive; \
  $$sudo apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null 2>&1 \
    || { $$sudo apt-get update -qq >/dev/null && $$sudo apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null; } \
    || { echo "mmdebstrap: apt-get could not install it" >&2; exit 1; }; \
fi
endef
# Debian's mirror may serve a snapshot whose Release file's Valid-Until date has passed (this
# machine's does): apt is told not to refuse it for that; its signature is still checked.
MMDEBSTRAP := mmdebstrap --quiet --aptopt='Acquire::Check-Valid-Until "false"'
comma := ,
empty :=
space := $(empty) $(empty)

# --- CPython 3.14 and 3.15: Debian unstable's, in a root under target/ --------------------------
# The CPythons of ROOT_PYTHONS come from Debian's unstable archive (sid), which has each with
# -dev, -venv and libpython3.X-testsuite (CPython's own tests, test.test_asyncio among them);
# PYROOT_TOOLS are the programs the suite runs or compares with that this machine has too (the
# test of each skips without its program; unstable has no h2o). mmdebstrap installs them into PYROOT (about 700 MB,
# a minute or two), kept between runs; a change of PYROOT_DEBS makes it again (the stamp's
# name is the list's checksum). Making and entering the root need root.
#
# Their wheels are built here, with the same maturin and zig as the others: maturin reads the
# interpreter's tags through PYROOT_BIN/python3.X (a script running the root's python3.X under
# chroot), PyO3 its build configuration from PYROOT_BIN/pyo3-3.X.txt (PYO3_CONFIG_FILE), written
# from that interpreter's sysconfig when the root is made, as PyO3 would read it.
ROOT_PYTHONS := 3.14 3.15
PYROOT := target/pyroot
PYROOT_BIN := target/pyroot-bin
PYROOT_SUITE := sid
PYROOT_TOOLS := curl make gcc libc6-dev nginx mount
PYROOT_DEBS := $(foreach v,$(ROOT_PYTHONS),python$(v)-dev python$(v)-venv libpython$(v)-testsuite) \
	$(PYROOT_TOOLS)
PYROOT_STAMP := $(PYROOT)/.made-$(firstword $(shell echo '$(PYROOT_SUITE) $(PYROOT_DEBS)' | cksum))
PYO3_CONFIG_SCRIPT := import struct, sys, sysconfig; v = sysconfig.get_config_var; print("\n".join([\
	"implementation=CPython", "version=%d.%d" % sys.version_info[:2], \
	"shared=" + str(bool(v("Py_ENABLE_SHARED"))).lower(), "abi3=false", \
	"lib_name=python" + v("LDVERSION"), "lib_dir=" + v("LIBDIR"), "executable=" + sys.executable, \
	"pointer_width=%d" % (8 * struct.calcsize("P")), \
	"build_flags=" + ",".join(f for f in ("Py_DEBUG", "Py_REF_DEBUG", "Py_GIL_DISABLED", "COUNT_ALLOCS") if v(f)), \
	"suppress_build_script_link_lines=false"]))
# `$(IN_PYROOT) DIR [VAR=value...] CMD...` runs CMD in the root with DIR (a directory here) as
# its /tmp, in an environment of root's PATH, HOME and LANG (and the VARs) only. The mounts it
# needs (/proc, /dev, /sys, DIR) are made in a mount namespace of its own (unshare -m): no other
# process sees them, and they are gone when CMD ends, however it ends. The root is bound onto
# itself first, so that its / is a mount point, as the tests that unshare a mount namespace of
# their own need.
IN_PYROOT = unshare --mount --propagation private -- sh -ec \
	'r=$$1; t=$$2; shift 2; chmod 1777 "$$t"; mount --bind "$$r" "$$r"; \
	mount -t proc proc "$$r/proc"; mount --rbind /dev "$$r/dev"; \
	mount --rbind /sys "$$r/sys"; mount --bind "$$t" "$$r/tmp"; \
	exec chroot "$$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$$@"' \
	sh $(abspath $(PYROOT))

$(PYROOT_STAMP):
	@set -eo pipefail; $(NEED_MMDEBSTRAP); \
	if [ "$$(id -u)" != 0 ]; then \
	  echo "pyroot: making and entering the root of CPython $(ROOT_PYTHONS) needs root (chroot, mount)" >&2; exit 1; \
	fi; \
	rm -rf $(PYROOT) $(PYROOT).new $(PYROOT_BIN); mkdir -p target $(PYROOT_BIN); \
	echo "pyroot: Debian $(PYROOT_SUITE)'s $(strip $(PYROOT_DEBS)) into $(PYROOT) (mmdebstrap)"; \
	$(MMDEBSTRAP) --variant=apt --include=$(subst $(space),$(comma),$(strip $(PYROOT_DEBS))) \
	  $(PYROOT_SUITE) $(PYROOT).new; \
	mv $(PYROOT).new $(PYROOT); \
	for v in $(ROOT_PYTHONS); do \
	  printf '#!/bin/sh\n# CPython %s of the root %s, for maturin\nexec chroot %s /usr/bin/python%s "$$@"\n' \
	    $$v $(PYROOT) $(abspath $(PYROOT)) $$v > $(PYROOT_BIN)/python$$v; \
	  chmod 755 $(PYROOT_BIN)/python$$v; \
	  $(PYROOT_BIN)/python$$v -c '$(PYO3_CONFIG_SCRIPT)' > $(PYROOT_BIN)/pyo3-$$v.txt; \
	done; \
	touch $@

# What the suite needs beside fdkit (requirements-test.txt), as wheels in the root, for each
# of its CPythons: pip download run there by that interpreter (so each requirement's markers
# are its own), with this machine's CA bundle where PIP_CERT names one and its proxy variables.
# The tests' venvs then install from it, offline.
PYROOT_WHEELHOUSE := /opt/wheelhouse
$(PYROOT)$(PYROOT_WHEELHOUSE)/%/.filled: $(PYROOT_STAMP) requirements-test.txt
	@set -eo pipefail; tmp=$$(mktemp -d -t fdkit-pyroot.XXXXXX); trap 'rm -rf "$$tmp"' EXIT; \
	rm -rf $(@D); mkdir -p $(@D); cp requirements-test.txt "$$tmp/"; \
	cp -L /etc/resolv.conf $(PYROOT)/etc/resolv.conf 2>/dev/null || true; \
	set -- $$(env | grep -E '^(https?|no|HTTPS?|NO)_(proxy|PROXY)=' || true); \
	if [ -n "$${PIP_CERT:-}" ]; then cp "$$PIP_CERT" $(PYROOT)/etc/fdkit-pip-cert.pem; set -- "$$@" PIP_CERT=/etc/fdkit-pip-cert.pem; fi; \
	echo "pyroot: requirements-test.txt for CPython $* into $(@D) (pip download, in the root)"; \
	$(IN_PYROOT) "$$tmp" "$$@" sh -ec 'python$* -m venv /tmp/venv; \
	  /tmp/venv/bin/python -m pip download --quiet --disable-pip-version-check --only-binary :all: \
	    -r /tmp/requirements-test.txt -d $(PYROOT_WHEELHOUSE)/$*'; \
	touch $@

$(STAMP_WHEEL_TOOLS): $(STAMP_DEPS) requirements-wheels.txt
	$(PY) -m pip install --quiet -r requirements-wheels.txt
	touch $@

$(foreach v,$(ROOT_PYTHONS),$(WHEEL_DIR)/.built-$(v)): $(PYROOT_STAMP)

$(WHEEL_DIR)/.built-%: $(STAMP_WHEEL_TOOLS) $(WHEEL_INPUTS)
	@set -eo pipefail; ver=$*; tag=cp$(subst .,,$*); \
	if [ -n "$(filter $*,$(ROOT_PYTHONS))" ]; then \
	  py=$(abspath $(PYROOT_BIN))/python$$ver; export PYO3_CONFIG_FILE=$(abspath $(PYROOT_BIN))/pyo3-$$ver.txt; \
	else $(FIND_PYTHON); fi; \
	echo "wheels: CPython $$ver ($$py)"; \
	case "$(LIBGCC_S)" in /*) ;; *) echo "wheels: no libgcc_s.so.1 (from \`cc -print-file-name\`)" >&2; exit 1;; esac; \
	mkdir -p $(WHEEL_DIR); rm -f $(WHEEL_DIR)/fdkit-*-$$tag-$$tag-*x86_64.whl; \
	RUSTFLAGS="$${RUSTFLAGS:-} -C link-arg=$(LIBGCC_S)" \
	$(VENV)/bin/maturin build --release --strip --zig --compatibility $(WHEEL_COMPAT) \
	  --interpreter "$$py" --out $(WHEEL_DIR); \
	whl=$$(ls $(WHEEL_DIR)/fdkit-*-$$tag-$$tag-*x86_64.whl); \
	$(VENV)/bin/auditwheel show "$$whl" | tee $(WHEEL_DIR)/auditwheel-$$tag.txt; \
	tr -s ' \n' '  ' < $(WHEEL_DIR)/auditwheel-$$tag.txt \
	  | grep -Eq 'consistent with the following platform tag: "manylinux_2_(17|28)_' \
	  || { echo "wheels: $$whl is not manylinux2014 or manylinux_2_28" >&2; exit 1; }
	@touch $@

# --- aarch64 wheels --------------------------------------------------------------------------
# The same wheels for 64-bit Arm, cross-built here by zig, for the CPythons in
# WHEEL_AARCH64_PYTHONS: those Debian builds for arm64, each taken from the Debian release that
# has it (AARCH64_SUITES: bookworm's 3.11, unstable's 3.13, 3.14 and 3.15; no Debian has an arm64
# 3.12). What comes of each release's arm64 packages is unpacked by mmdebstrap (--variant=extract
# --architectures=arm64: nothing is installed, nothing runs, the machine's apt configuration is
# not touched) into target/aarch64-sysroot-RELEASE: the libgcc_s.so.1 the wheel links (the reason
# is above LIBGCC_S), the interpreter's sysconfig that maturin and PyO3 build against
# (PYO3_CROSS_LIB_DIR: no CPython of that version need be on this machine), and for `make
# test-wheels-aarch64` the arm64 CPython itself with the libraries its stdlib loads, run by
# qemu-user. Where a release keeps its files under /usr only (merged /usr, unstable), the links
# /bin, /sbin and /lib that installing would make are made here (the dynamic linker is
# /lib/ld-linux-aarch64.so.1). A wheel no test has run is not shipped: every version here has
# its CPython to test on. `make wheels WHEEL_AARCH64_PYTHONS=` builds x86-64 alone.
# For the tests, once per machine (root): apt-get install qemu-user-static.
WHEEL_AARCH64_PYTHONS := 3.11 3.13 3.14 3.15
AARCH64_SUITES := 3.11:bookworm 3.13:sid 3.14:sid 3.15:sid
aarch64_suite = $(patsubst $(1):%,%,$(filter $(1):%,$(AARCH64_SUITES)))
AARCH64_TARGET := aarch64-unknown-linux-gnu
AARCH64_SYSROOT = target/aarch64-sysroot-$(1)
# Each release's packages: the C library and libgcc, and each of its CPythons with its venv
# module (apt brings what they depend on: the stdlib, its libraries, pip's wheel).
aarch64_debs = libc6 libgcc-s1 $(foreach v,$(WHEEL_AARCH64_PYTHONS),$(if $(filter $(1),$(call aarch64_suite,$(v))),python$(v) python$(v)-venv))
aarch64_stamp = $(call AARCH64_SYSROOT,$(1))/.unpacked-$(firstword $(shell echo '$(1) $(call aarch64_debs,$(1))' | cksum))
WHEEL_AARCH64_STAMPS := $(foreach v,$(WHEEL_AARCH64_PYTHONS),$(WHEEL_DIR)/.built-aarch64-$(v))
# Under qemu-user every instruction is translated and the machine is shared: the whole suite
# would take hours. The run covers each capability's native code (about 1,300 tests, 10 minutes
# here, plus 10 to set the venv up) with a generous per-test timeout. Left out, each for
# qemu-user's sake (all pass natively): test_threads.py finds a thread's syscall in
# /proc/TID/syscall, where qemu shows the host's x86-64 numbers; qemu answers socket() of an
# unknown type with EPROTONOSUPPORT, not EINVAL, and the ioctl SIOCOUTQNSD with ENOSYS; it
# refuses seccomp filters (the no-io_uring helper installs one); a write to a closed stdout
# kills it with SIGPIPE that CPython ignores natively; it answers getsockopt(TCP_INFO) with 4
# bytes (the accept-queue test reads tcpi_unacked at byte 24).
AARCH64_TEST_TIMEOUT := 600
AARCH64_TESTS := test_package test_binding_module test_errors_causes test_errors_bad_arguments \
	test_fd_files test_fd_sockets test_fd_splice test_zerocopy_transfer_counts \
	test_zerocopy_transfer_peers test_zerocopy_transfer_fallbacks test_zerocopy_pipe \
	test_atomic_pipe_wire \
	test_atomic_pipe_vectors test_atomic_pipe_api test_aio_engine test_uring_ring test_cli
AARCH64_QEMU_DESELECT := test_errors_causes.py::test_einval_socket_state \
	test_fd_splice.py::test_ioctl_int_requests \
	test_aio_engine.py::test_without_io_uring_the_loop_runs_on_epoll_and_says_why \
	test_cli.py::test_closed_stdout_after_help_is_quiet \
	test_aio_engine.py::test_a_server_takes_no_connection_before_asyncio_accepts
AARCH64_PYTEST_ARGS := $(foreach f,$(AARCH64_TESTS),tests/$(f).py) \
	$(foreach t,$(AARCH64_QEMU_DESELECT),--deselect tests/$(t))

define AARCH64_SYSROOT_RULE
$(call aarch64_stamp,$(1)):
	@set -eo pipefail; $$(NEED_MMDEBSTRAP); \
	root=$(call AARCH64_SYSROOT,$(1)); rm -rf "$$$$root" "$$$$root.new"; mkdir -p target; \
	echo "aarch64: Debian $(1)'s arm64 $(strip $(call aarch64_debs,$(1))) (and what they depend on) into $$$$root (mmdebstrap, extracted)"; \
	$(MMDEBSTRAP) --variant=extract --architectures=arm64 \
	  --include=$$(subst $$(space),$$(comma),$(strip $(call aarch64_debs,$(1)))) $(1) "$$$$root.new"; \
	for d in bin sbin lib; do [ -e "$$$$root.new/$$$$d" ] || ln -s "usr/$$$$d" "$$$$root.new/$$$$d"; done; \
	mv "$$$$root.new" "$$$$root"; \
	touch $$@
endef
$(foreach s,$(sort $(foreach v,$(WHEEL_AARCH64_PYTHONS),$(call aarch64_suite,$(v)))),$(eval $(call AARCH64_SYSROOT_RULE,$(s))))
$(foreach v,$(WHEEL_AARCH64_PYTHONS),$(eval $(WHEEL_DIR)/.built-aarch64-$(v): $(call aarch64_stamp,$(call aarch64_suite,$(v)))))

$(WHEEL_DIR)/.built-aarch64-%: $(STAMP_WHEEL_TOOLS) $(WHEEL_INPUTS)
	@set -eo pipefail; tag=cp$(subst .,,$*); root=$(abspath $(call AARCH64_SYSROOT,$(call aarch64_suite,$*))); \
	[ -n "$(call aarch64_suite,$*)" ] || { echo "wheels: no Debian release for an arm64 CPython $* in AARCH64_SUITES" >&2; exit 1; }; \
	echo "wheels: CPython $* for aarch64 (cross-built by zig, against $$root/usr/lib/python$*)"; \
	rustup target list --installed | grep -qx $(AARCH64_TARGET) || rustup target add $(AARCH64_TARGET); \
	mkdir -p $(WHEEL_DIR); rm -f $(WHEEL_DIR)/fdkit-*-$$tag-$$tag-*aarch64.whl; \
	RUSTFLAGS="$${RUSTFLAGS:-} -C link-arg=$$root/lib/aarch64-linux-gnu/libgcc_s.so.1" \
	PYO3_CROSS_LIB_DIR=$$root/usr/lib/python$* \
	$(VENV)/bin/maturin build --release --strip --zig --target $(AARCH64_TARGET) \
	  --compatibility $(WHEEL_COMPAT) --out $(WHEEL_DIR); \
	whl=$$(ls $(WHEEL_DIR)/fdkit-*-$$tag-$$tag-*aarch64.whl); \
	$(VENV)/bin/auditwheel show "$$whl" | tee $(WHEEL_DIR)/auditwheel-$$tag-aarch64.txt; \
	tr -s ' \n' '  ' < $(WHEEL_DIR)/auditwheel-$$tag-aarch64.txt \
	  | grep -Eq 'consistent with the following platform tag: "manylinux_2_(17|28)_aarch64"' \
	  || { echo "wheels: $$whl is not manylinux2014 or manylinux_2_28" >&2; exit 1; }
	@touch $@

.PHONY: wheels-aarch64
wheels-aarch64: $(WHEEL_AARCH64_STAMPS) ## the aarch64 wheels alone (cross-built by zig)
	@ls -l $(WHEEL_DIR)/*aarch64.whl

# Each aarch64 wheel in a fresh venv of Debian's arm64 CPython of its version, run by
# qemu-aarch64-static with that release's sysroot as its root (-L), outside the tree like
# test-wheels. With no binfmt_misc in a container, the kernel cannot exec an arm64 program
# itself: the venv's python is a script that starts qemu, so a test's subprocess
# (sys.executable, the `fdkit` command) runs under qemu too. pip is installed from the
# release's own pip wheel, run from the wheel (Debian's ensurepip copies that wheel with its
# extended attributes, a syscall qemu -L does not redirect into the sysroot). qemu-user has no
# io_uring: `fdkit doctor` says so first, and the io_uring tests skip (SKIPPED lines): this run
# tests the epoll engine and the fallbacks. AARCH64_PYTEST_ARGS picks tests. A version takes
# from 10 minutes to half an hour here (the CLI tests start a Python under qemu each time), up
# to two hours for four: `make test-wheels` (CI) runs the x86-64 wheels only, and this target
# is run by hand before a release.
.PHONY: test-wheels-aarch64
test-wheels-aarch64: $(WHEEL_AARCH64_STAMPS) ## the aarch64 wheels under qemu-user, Debian's arm64 CPythons: pytest on each
	@set -eo pipefail; \
	qemu=$$(command -v qemu-aarch64-static || command -v qemu-aarch64) \
	  || { echo "test-wheels-aarch64: no qemu-aarch64-static; as root: apt-get install qemu-user-static" >&2; exit 1; }; \
	failed=""; tmp=""; trap 'rm -rf "$$tmp"' EXIT; \
	for ver in $(WHEEL_AARCH64_PYTHONS); do \
	  suite=$$(for p in $(AARCH64_SUITES); do [ "$${p%%:*}" != "$$ver" ] || echo "$${p#*:}"; done); \
	  root=$(abspath $(call AARCH64_SYSROOT,$$suite)); \
	  tag=cp$$(echo $$ver | tr -d .); py="$$root/usr/bin/python$$ver"; \
	  whl=$$(ls $(WHEEL_DIR)/fdkit-*-$$tag-$$tag-*aarch64.whl); \
	  tmp=$$(mktemp -d -t fdkit-wheel-$$tag-aarch64.XXXXXX); chmod 755 "$$tmp"; \
	  echo "test-wheels-aarch64: $$whl in $$tmp/venv ($$py under $$qemu)"; \
	  ( "$$qemu" -L "$$root" "$$py" -m venv --without-pip "$$tmp/venv" \
	    && rm "$$tmp/venv/bin/python$$ver" \
	    && printf '#!/bin/sh\nexec %s -L %s -0 "$$0" %s "$$@"\n' "$$qemu" "$$root" "$$py" > "$$tmp/venv/bin/python$$ver" \
	    && chmod 755 "$$tmp/venv/bin/python$$ver" \
	    && pipwhl=$$(ls "$$root"/usr/share/python-wheels/pip-*.whl) \
	    && "$$tmp/venv/bin/python" "$$pipwhl/pip" install --quiet --disable-pip-version-check --no-index "$$pipwhl" \
	    && "$$tmp/venv/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary :all: \
	      -r requirements-test.txt "$$whl" \
	    && cp -r $(wildcard $(WHEEL_TEST_FILES)) "$$tmp/" \
	    && cd "$$tmp" && env -u VIRTUAL_ENV -u PYTHONPATH \
	      PATH="$$tmp/venv/bin:$(subst $(abspath $(VENV))/bin:,,$(PATH))" \
	      sh -c 'venv/bin/python -c "import platform; print(\"test-wheels-aarch64: machine\", platform.machine())" \
	        && venv/bin/fdkit doctor \
	        && exec venv/bin/python -m pytest -p no:cacheprovider --timeout $(AARCH64_TEST_TIMEOUT) "$$@"' \
	      sh $(AARCH64_PYTEST_ARGS) ) || failed="$$failed $$ver"; \
	  rm -rf "$$tmp"; \
	done; \
	if [ -n "$$failed" ]; then echo "test-wheels-aarch64: failed for CPython$$failed" >&2; exit 1; fi

.PHONY: wheels
wheels: $(WHEEL_STAMPS) $(WHEEL_AARCH64_STAMPS) ## release wheels: x86-64 for CPython 3.11-3.15, aarch64 for 3.11, 3.13-3.15 (manylinux2014)
	@ls -l $(WHEEL_DIR)/*.whl

# Each wheel's suite runs whole, except on the Python `make test` ran it on (the venv's, the
# first of WHEEL_PYTHONS): there the same tests of the same code differ only by the build profile
# (the other wheels test fat LTO) and by the install, so that wheel runs the tests of what
# installing changes (WHEEL_INSTALL_TESTS: the distribution, the binding module, the CLI's entry
# point, the examples, uvicorn finding the loop by name; none is `serial`). WHEEL_FULL=1 runs the
# whole suite on every wheel. The whole suite includes CPython's own loop tests of that version
# on fdkit.aio, on each engine (tests/test_aio_cpython.py).
#
# The wheels of ROOT_PYTHONS are tested in the root (PYROOT), where their CPython is: the venv,
# the tree's copy and the wheel sit in a directory here that the root sees as its /tmp, the
# venv installs from the root's wheelhouse (no network), and the suite runs there as it runs
# here, in an environment of its own (IN_PYROOT). PYTEST_ARGS may pick tests of one pass alone
# (`serial` or not): the other then selects none, pytest's status 5, which is no failure.
VENV_PYTHON_VERSION = $(shell $(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
WHEEL_INSTALL_TESTS := tests/test_package.py tests/test_binding_module.py tests/test_cli.py \
	tests/test_examples.py tests/test_aio_uvicorn.py tests/test_types.py
PYROOT_WHEELHOUSES := $(foreach v,$(filter $(ROOT_PYTHONS),$(WHEEL_PYTHONS)),$(PYROOT)$(PYROOT_WHEELHOUSE)/$(v)/.filled)

.PHONY: test-wheels
test-wheels: $(WHEEL_STAMPS) $(PYROOT_WHEELHOUSES) ## each wheel in a fresh venv of its Python (3.14, 3.15 in a root of Debian's), outside the tree: pytest on the installed fdkit
	@set -o pipefail; failed=""; tmp=""; trap 'rm -rf "$$tmp"' EXIT; \
	for ver in $(WHEEL_PYTHONS); do \
	  tag=cp$$(echo $$ver | tr -d .); \
	  whl=$$(ls $(WHEEL_DIR)/fdkit-*-$$tag-$$tag-*x86_64.whl); \
	  tmp=$$(mktemp -d -t fdkit-wheel-$$tag.XXXXXX); chmod 755 "$$tmp"; \
	  if [ -n "$$(echo ' $(ROOT_PYTHONS) ' | grep -F " $$ver ")" ]; then \
	    echo "test-wheels: $$whl in $(PYROOT)'s /tmp/venv (Debian's python$$ver; /tmp is $$tmp)"; \
	    cp -r $(wildcard $(WHEEL_TEST_FILES)) requirements-test.txt "$$whl" "$$tmp/" \
	    && $(IN_PYROOT) "$$tmp" PYTEST_ARGS="$(PYTEST_ARGS)" sh -ec 'cd /tmp; \
	         python$$1 -m venv venv; \
	         venv/bin/python -m pip install --quiet --disable-pip-version-check --no-index \
	           --find-links $(PYROOT_WHEELHOUSE)/$$1 -r requirements-test.txt "./$$2"; \
	         export PATH="/tmp/venv/bin:$$PATH"; \
	         venv/bin/python -m pytest -p no:cacheprovider -n $(PYTEST_JOBS) --dist loadfile \
	           -m "not serial" $$PYTEST_ARGS || [ $$? = 5 ]; \
	         venv/bin/python -m pytest -p no:cacheprovider -m serial $$PYTEST_ARGS || [ $$? = 5 ]' \
	       sh "$$ver" "$$(basename "$$whl")" \
	    || failed="$$failed $$ver"; \
	    rm -rf "$$tmp"; continue; \
	  fi; \
	  $(FIND_PYTHON); \
	  tests=""; \
	  if [ -z "$(WHEEL_FULL)" ] && [ "$$ver" = "$(VENV_PYTHON_VERSION)" ]; then \
	    tests="$(WHEEL_INSTALL_TESTS)"; \
	    echo "test-wheels: CPython $$ver ran the whole suite in make test: this wheel runs $$tests"; \
	  fi; \
	  echo "test-wheels: $$whl in $$tmp/venv ($$py)"; \
	  "$$py" -m venv "$$tmp/venv" \
	  && "$$tmp/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
	       -r requirements-test.txt "$$whl" \
	  && cp -r $(wildcard $(WHEEL_TEST_FILES)) "$$tmp/" \
	  && ( cd "$$tmp" \
	       && { env -u VIRTUAL_ENV -u PYTHONPATH \
	              PATH="$$tmp/venv/bin:$(subst $(abspath $(VENV))/bin:,,$(PATH))" \
	              venv/bin/python -m pytest -p no:cacheprovider -n $(PYTEST_JOBS) --dist loadfile \
	              -m "not serial" $(PYTEST_ARGS) $$tests || [ $$? = 5 ]; } \
	       && { [ -n "$$tests" ] || venv/bin/python -m pytest -p no:cacheprovider -m serial $(PYTEST_ARGS) \
	            || [ $$? = 5 ]; } ) \
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
