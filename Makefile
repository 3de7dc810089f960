# Two commands for a fresh machine: `make demo` and `make test`.
# The first installed Python the project supports (3.11-3.13); PYTHON=... overrides. Each one is
# run, not just looked up: a pyenv shim exists for versions that are installed but not selected.
SUPPORTED_PYTHON := import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))
PYTHON ?= $(firstword $(foreach p,python3.11 python3.12 python3.13 python3,$(if $(shell $(p) -c '$(SUPPORTED_PYTHON)' >/dev/null 2>&1 && echo ok),$(p))))
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Test settings: PostgreSQL and Redis on this machine unless told otherwise.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/gpuportal
TEST_REDIS_URL ?= redis://127.0.0.1:6379/0

.PHONY: demo test lint venv docs

# The portal, kubesim (kubesim/, the simulated cluster of the tests and the demo) and the gpuportal
# CLI (cli/) are three distributions, installed side by side in development mode. "compat" editable
# mode puts kubesim/ itself on sys.path, so `import kubesim` finds the package kubesim/kubesim/ and
# not the distribution's folder (which would otherwise import as an empty namespace package).
$(STAMP): pyproject.toml kubesim/pyproject.toml cli/pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python 3.11, 3.12 or 3.13 is needed (none found on PATH)" >&2; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --config-settings editable_mode=compat \
		-e '.[dev]' -e ./kubesim -e ./cli
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) manage.py demo

test: $(STAMP)
	bash scripts/check-standalone.sh
	bash scripts/check-python-versions.sh $(PY)
	bash scripts/ensure-services.sh
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DATABASE_URL=$(TEST_DATABASE_URL) $(PY) manage.py makemigrations --check --dry-run
	DATABASE_URL=$(TEST_DATABASE_URL) PORTAL_TEST_REDIS_URL=$(TEST_REDIS_URL) \
		PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# The documentation site (docs/, mkdocs.yml), rebuilt on every change; the suite builds it strictly.
docs: $(STAMP)
	$(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8001
