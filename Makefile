# Two commands for a fresh machine: `make demo` and `make test`.
# The first installed Python the project supports (3.11-3.13); PYTHON=... overrides. Each one is
# run, not just looked up: a pyenv shim exists for versions that are installed but not selected.
SUPPORTED_PYTHON := import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))
PYTHON ?= $(firstword $(foreach p,python3.11 python3.12 python3.13 python3,$(if $(shell $(p) -c '$(SUPPORTED_PYTHON)' >/dev/null 2>&1 && echo ok),$(p))))
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Test settings: PostgreSQL on this machine unless told otherwise. Each pytest worker creates
# its own test database from this one's name and starts its own redis-server (tests/conftest.py);
# PORTAL_TEST_REDIS_URL=redis://HOST:PORT/DB in the environment points them at a given Redis.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/gpuportal
# Parallel pytest workers (pytest-xdist). More workers than the 2 cores pays: many tests wait on
# subprocesses (kubesim, celery, chromium) rather than compute. TEST_WORKERS=0 runs in-process.
TEST_WORKERS ?= 4

.PHONY: demo test lint venv docs bench

# The portal, kubesim (kubesim/, the simulated cluster of the tests and the demo) and the gpuportal
# CLI (cli/) are three distributions, installed side by side in development mode. "compat" editable
# mode puts kubesim/ itself on sys.path, so `import kubesim` finds the package kubesim/kubesim/ and
# not the distribution's folder (which would otherwise import as an empty namespace package).
# uv (from PyPI) installs the same set as pip in about a tenth of the time; pip does it where uv
# cannot be had. Byte-compiled at install, as pip does: the tests' processes then load .pyc files.
$(STAMP): pyproject.toml kubesim/pyproject.toml cli/pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python 3.11, 3.12 or 3.13 is needed (none found on PATH)" >&2; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	if $(PY) -m pip install --quiet uv; then \
		$(PY) -m uv pip install --quiet --python $(PY) --compile-bytecode --upgrade pip && \
		$(PY) -m uv pip install --quiet --python $(PY) --compile-bytecode \
			--config-setting editable_mode=compat -e '.[dev]' -e ./kubesim -e ./cli; \
	else \
		$(PY) -m pip install --quiet --upgrade pip && \
		$(PY) -m pip install --quiet --config-settings editable_mode=compat \
			-e '.[dev]' -e ./kubesim -e ./cli; \
	fi
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) manage.py demo

# PYTHONDONTWRITEBYTECODE is cleared for pytest: its workers then share the rewritten test
# modules, and the ~200 processes the tests start (kubesim, celery, uvicorn) the compiled portal.
# The Python-versions check (pip resolving for 3.12/3.13: network and pip, not our code) runs
# beside pytest; its output follows pytest's, and either failing fails the target. pytest ends
# with the 20 slowest tests (--durations=20).
test: $(STAMP)
	bash scripts/check-standalone.sh
	bash scripts/ensure-services.sh
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DATABASE_URL=$(TEST_DATABASE_URL) $(PY) manage.py makemigrations --check --dry-run
	@versions_log=$$(mktemp); \
	bash scripts/check-python-versions.sh $(PY) >"$$versions_log" 2>&1 & versions=$$!; \
	DATABASE_URL=$(TEST_DATABASE_URL) PATH="$(CURDIR)/$(VENV)/bin:$$PATH" PYTHONDONTWRITEBYTECODE= \
		$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal --durations=20 $(PYTEST_ARGS); \
	status=$$?; \
	if wait $$versions; then cat "$$versions_log"; \
	else cat "$$versions_log" >&2; echo "check-python-versions failed" >&2; status=1; fi; \
	rm -f "$$versions_log"; exit $$status

lint: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# The documentation site (docs/, mkdocs.yml), rebuilt on every change; the suite builds it strictly.
docs: $(STAMP)
	$(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8001

# The short version of every bench of the performance table (bench/_all.py), each the median of
# 3 pinned runs with private PostgreSQL and Redis; the table goes onto docs/benchmarks/index.md.
# It refuses on a busy machine: `make bench BENCH_ARGS=--force` measures anyway (marked BUSY).
BENCH_ARGS ?=
bench: $(STAMP)
	bash scripts/ensure-services.sh
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) bench/_all.py --write-docs $(BENCH_ARGS)
