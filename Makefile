# Both targets bootstrap .venv on first use, so a fresh clone needs only Python 3.11+ and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-busy test-fast lint dev clean chromium lock

# The browser tier (tests/console) drives Debian's Chromium through Playwright;
# `playwright install` is never run (it downloads a browser build). Root on every machine
# here, CI included; as another user it asks sudo (or install the `chromium` package yourself).
CHROMIUM := /usr/bin/chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

# A first install takes minutes, so it shows that it moves: a line per package pip collects,
# no progress bars. pip's whole output is kept in .venv/install.log, which a failure names.
# (bash for pipefail: pip's exit status, not grep's, decides.)
SHELL := /bin/bash
PIP := $(BIN)/pip install --progress-bar off
$(STAMP): pyproject.toml
	@echo "make: installing Herald and its dev tools into $(VENV) (a first install takes a few minutes)"
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	@set -o pipefail; { $(PIP) --upgrade pip && $(PIP) -e '.[dev]'; } 2>&1 | tee $(VENV)/install.log \
		| { grep --line-buffered -E '^(Collecting|Processing|Successfully|ERROR)' || true; } \
		|| { echo "make: the install failed; pip's whole output: $(VENV)/install.log" >&2; exit 1; }
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/herald demo

dev: $(STAMP)
	$(BIN)/herald dev

chromium:
	test -x $(CHROMIUM) || ($(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium)

# The tiers run in parallel worker processes, one test file at a time each (pytest-xdist):
# the suite waits on servers more than it computes, and every worker starts its own
# servers on free ports. TEST_WORKERS=0 runs it in this process alone.
TEST_WORKERS ?= 4
# The 20 slowest tests close every run, so a suite that grows shows where. Files are handed
# out costliest tier first (tests/conftest.py's costliest_files_first), not by xdist's own
# order (most tests first), which left the few-test, minute-long stack files for the end.
PYTEST_RUN = $(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20

test: lint chromium
	$(PYTEST_RUN)

# The suite on a busy machine: one core kept busy by a hog the target starts and stops
# (bench/busy.py; at most 30 minutes, loopback only). A test that races the clock fails here.
BUSY_CORES ?= 1
test-busy: lint chromium
	$(BIN)/python -m bench.busy --cores $(BUSY_CORES) --max-seconds 1800 -- $(PYTEST_RUN)

# unit and ledger tiers only: no Temporal server at all
test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not workflow and not e2e and not slow"

# every Python tree of the product and its bench (tests are checked by ruff only)
TYPED := domain workflows activities starter api ledger cli runtime devstack transports simulators bench settings.py worker.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy $(TYPED)

# The production image's dependencies (Dockerfile), every version pinned with the hashes of
# its files, resolved for the image's Python on any platform: requirements.lock (pyproject's
# runtime dependencies, no extras) and requirements-build.lock (its build backend, which
# builds Herald and the one sdist-only dependency, dkimpy, with no isolated fetch). Run
# after changing a dependency in pyproject.toml; tests/ops/test_production_image.py fails
# until you do.
LOCK_PYTHON := 3.12
LOCK := $(BIN)/uv pip compile --universal --python-version $(LOCK_PYTHON) --generate-hashes \
	--no-emit-index-url --custom-compile-command 'make lock' --quiet
lock: $(STAMP)
	$(LOCK) pyproject.toml -o requirements.lock
	$(BIN)/python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['build-system']['requires'], sep='\n')" \
	  | $(LOCK) - -o requirements-build.lock

clean:
	rm -rf $(VENV) .herald
