# Two commands for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Test settings: PostgreSQL and Redis on this machine unless told otherwise.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/gpuportal
TEST_REDIS_URL ?= redis://127.0.0.1:6379/0

.PHONY: demo test lint venv

$(STAMP): pyproject.toml cli/pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "$(PYTHON) not found; trying python3"; }
	test -x $(PY) || ($(PYTHON) -m venv $(VENV) 2>/dev/null || python3 -m venv $(VENV))
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' -e ./cli
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) manage.py demo

test: $(STAMP)
	bash scripts/ensure-services.sh
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DATABASE_URL=$(TEST_DATABASE_URL) $(PY) manage.py makemigrations --check --dry-run
	DATABASE_URL=$(TEST_DATABASE_URL) PORTAL_TEST_REDIS_URL=$(TEST_REDIS_URL) \
		PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
