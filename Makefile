# cloudloop: the two commands (see README) and their building blocks.
#   make dev    - set up, then run the whole system on the embedded local stack (Ctrl-C stops it)
#   make test   - set up, then lint, type-check and run the whole test suite against the stack
#   make bench  - set up, then run every benchmark (or MODULES="a b") and print name=value figures
#   make test-fast - lint, types and the tests that need no stack (seconds)

PYTHON ?= python3

# Python keeps the bytecode it compiles (__pycache__, ignored by git and the image build) even
# where the environment turns that off: without it every test process, and every `cloudloop`
# process a test starts, compiles the SDKs (botocore, openstacksdk, kubernetes, ...) and rewrites
# the test modules again, about half of the fast suite's start-up.
unexport PYTHONDONTWRITEBYTECODE
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: dev test test-fast unit-fast bench setup tools lint typecheck unit clean lock lock-runtime

# The demo builds (once, cached) only the Go tools its stack needs: the AWS demo the control plane
# and kwok, not the CSI sidecars, csi-sanity, vcsim or helm that `make test` builds.
dev: $(STAMP)
	$(BIN)/cloudloop dev $(DEV_ARGS)

# `make test` runs the tests in PYTEST_WORKERS pytest-xdist processes (3 on this 2-core machine
# kind: the stack tests wait on their servers as much as they compute), each with stacks (and a
# share of the ports: tests/conftest.py) of its own; a test file stays on one worker, so its
# module-scoped stacks start once, and the costliest files are handed out first. A whole run on a
# quiet machine took 22 min against 53 serial (issue 31); PYTEST_WORKERS=0 runs it serially.
PYTEST_WORKERS ?= 3
FAST_WORKERS ?= 2
xdist = -n $(1) --dist loadfile --no-loadscope-reorder

test: setup lint typecheck installdeps
	$(BIN)/pytest -p no:cacheprovider $(call xdist,$(PYTEST_WORKERS)) --durations=25

# Lint, types and every test that needs no stack (pure and time-skipping workflow tests), in
# FAST_WORKERS processes. The three run at once (a sub-make with -j, each one's output printed
# whole when it ends); the target fails when any of them fails. These tests start no stack, so
# they are handed out test by test and an idle worker steals from a busy one (`worksteal`): 56 s
# against 60 s with whole files per worker on a quiet 2-core machine.
test-fast: $(STAMP)
	@$(MAKE) --no-print-directory -j3 --output-sync=target lint typecheck unit-fast

unit-fast: $(STAMP)
	$(BIN)/pytest -p no:cacheprovider -n $(FAST_WORKERS) --dist worksteal -m "not stack" -q --durations=25

bench: setup
	$(BIN)/python -m bench $(MODULES)

setup: $(STAMP) tools

$(STAMP): pyproject.toml devstack/pyproject.toml requirements.lock
	@command -v go >/dev/null || { echo "Go (1.24+) is required to build the local stack"; exit 1; }
	@$(MAKE) --no-print-directory sysdeps
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip uv
	$(BIN)/uv pip install --python $(BIN)/python -q -r requirements.lock
	$(BIN)/uv pip install --python $(BIN)/python -q --no-deps -e . -e ./devstack
	touch $(STAMP)

# ovirt-engine-sdk-python (the zVirt driver's SDK) is published as source only: its C extension
# needs a C compiler, the libxml2 headers and Python's headers (pycurl, its dependency, installs
# as a binary wheel). Nothing happens when they are present; otherwise, on Debian/Ubuntu, only the
# missing packages are installed with apt-get (as root, or through sudo).
.PHONY: sysdeps
LIBXML2_HEADER ?= /usr/include/libxml2/libxml/xmlreader.h
sysdeps:
	@py_h=$$($(PYTHON) -c 'import os, sysconfig; print(os.path.join(sysconfig.get_paths()["include"], "Python.h"))'); \
	if { command -v gcc || command -v cc; } >/dev/null 2>&1 && [ -f "$(LIBXML2_HEADER)" ] && [ -f "$$py_h" ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then \
		echo "ovirt-engine-sdk-python needs a C compiler, $(LIBXML2_HEADER) (libxml2 headers) and $$py_h; install them"; exit 1; \
	fi; \
	wanted="gcc libc6-dev libxml2-dev"; [ -f "$$py_h" ] || wanted="$$wanted python3-dev"; \
	missing=""; for pkg in $$wanted; do \
		dpkg-query -W -f='$${Status}' "$$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$pkg"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	sudo=""; [ "$$(id -u)" = 0 ] || sudo="sudo"; \
	echo "installing the build dependencies of ovirt-engine-sdk-python:$$missing"; \
	$$sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends $$missing

# The install tests' Debian tools: buildah and mmdebstrap build the image without a daemon (over a
# Debian base made locally), docker-compose validates docker-compose.yml. Like sysdeps: nothing
# happens when they are present; otherwise only the missing packages are installed with apt-get.
.PHONY: installdeps
INSTALL_PACKAGES ?= buildah mmdebstrap docker-compose
installdeps:
	@missing=""; for pkg in $(INSTALL_PACKAGES); do \
		dpkg-query -W -f='$${Status}' "$$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$pkg"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then echo "install$$missing (the image and compose tests skip without them)"; exit 0; fi; \
	sudo=""; [ "$$(id -u)" = 0 ] || sudo="sudo"; \
	echo "installing the install tests' tools:$$missing"; \
	$$sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends $$missing

# The image's locks: the product's dependencies at the versions of requirements.lock, and the build
# stage's pip and setuptools, every file hashed (deploy/Dockerfile installs with --require-hashes).
.PHONY: lock-runtime
lock-runtime: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml -c requirements.lock --generate-hashes --python-version 3.11 -q \
		--custom-compile-command "make lock-runtime" -o deploy/requirements-runtime.lock
	$(BIN)/uv pip compile deploy/build-tools.in --generate-hashes --python-version 3.11 -q \
		--custom-compile-command "make lock-runtime" -o deploy/requirements-build.lock

# Re-resolve the dependencies of pyproject.toml (with the dev extra) into requirements.lock.
lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 -q -o requirements.lock

# Builds kube-apiserver, etcd, kwok, the Temporal server, ... from Go modules once per version and
# installs the real Keystone of the identity tests (both cached in ~/.cache/cloudloop): every tool a
# test needs is made here, never inside a test's timeout.
tools: $(STAMP)
	$(BIN)/cloudloop stack build
	$(BIN)/cloudloop stack keystone

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -p no:cacheprovider -m "not stack"

clean:
	rm -rf $(VENV) .cloudloop .mypy_cache .ruff_cache
