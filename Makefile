# The few commands people type. `make run` and `make test` work on a machine with only Python 3.11:
# the virtualenv is created on first use, and PostgreSQL is embedded when DATABASE_URL is unset.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3 2>/dev/null)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: help venv run url key password test test-fast bench lint format typecheck migrations-check ci

help:
	@echo "make run               start web + worker + beat (embedded PostgreSQL unless DATABASE_URL is set)"
	@echo "make url               print the running service's address (export KHEISH_URL=\$$(make -s url))"
	@echo "make key NAME=my-agent ROLE=agent   print a new API key once (ROLE=operator: an operator key)"
	@echo "make password OPERATOR=operator     set a new password for an operator account (prompts, or reads stdin)"
	@echo "make test              run the whole test suite (PYTEST_ARGS='...' to pass pytest options)"
	@echo "make test-fast         the fast local loop: every test not marked slow (no servers, browsers or"
	@echo "                       subprocesses), on two workers (PYTEST_ARGS='...' adds options)"
	@echo "make bench             run the benchmarks (BENCH_ARGS='...')"
	@echo "make lint              ruff check and ruff format --check"
	@echo "make format            ruff format the tree"
	@echo "make typecheck         mypy with django-stubs and djangorestframework-stubs ([tool.mypy] in pyproject.toml)"
	@echo "make migrations-check  fail if a model change has no migration"
	@echo "make ci                what CI runs (.ci/run)"
	@echo "make venv              create/refresh .venv (re-installs only when pyproject.toml changed)"

venv: $(STAMP)

$(STAMP): pyproject.toml
	@if [ ! -x $(PY) ]; then \
	  if [ -z "$(PYTHON)" ]; then echo "Python 3.11 not found (python3.11 or python3)" >&2; exit 1; fi; \
	  echo "creating $(VENV) with $(PYTHON)"; \
	  $(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); \
	    echo "'$(PYTHON) -m venv' failed; on Debian/Ubuntu install python3.11-venv" >&2; exit 1; }; \
	fi
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

run: venv
	$(PY) -m kheish.launcher run

# Commands beside the service: manage.py finds its database and secret key itself (kheish/service_config.py).
key: venv
	@if [ -z "$(NAME)" ]; then echo "usage: make key NAME=my-agent ROLE=agent|operator" >&2; exit 2; fi
	@$(PY) manage.py create_api_key "$(NAME)" --role "$(or $(ROLE),agent)"

password: venv
	@$(PY) manage.py set_password "$(or $(OPERATOR),operator)"

url: venv
	@$(PY) -m kheish.launcher url

test: venv
	$(PY) -m kheish.launcher test $(PYTEST_ARGS)

# The slow tests (marker `slow`, set in tests/conftest.py: live servers, browsers, subprocesses, real workers)
# are left out; `make test` runs everything.
test-fast: venv
	$(PY) -m kheish.launcher test -m "not slow" -n 2 $(PYTEST_ARGS)

bench: venv
	$(PY) -m kheish.launcher bench $(BENCH_ARGS)

# `ruff format --check` is part of lint (and CI); KHEISH_FORMAT_CHECK=0 leaves it out.
lint: venv
	$(VENV)/bin/ruff check .
	@if [ "$${KHEISH_FORMAT_CHECK:-1}" = 1 ]; then $(VENV)/bin/ruff format --check .; fi

format: venv
	$(VENV)/bin/ruff format .

# The Django plugin reads the settings, which need a DATABASE_URL to parse (never connected to).
typecheck: venv
	DATABASE_URL=$${DATABASE_URL:-postgres://typecheck@127.0.0.1:1/typecheck} $(VENV)/bin/mypy

migrations-check: venv
	$(PY) manage.py makemigrations --check --dry-run

ci:
	bash .ci/run
