# Each target installs what it needs into .venv on first use; pyproject.toml changes re-install.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch==2.13.0 resolves to the CPU wheel on disk; naming it first keeps pip away from CUDA wheels.
	$(PY) -m pip install --quiet torch==2.13.0 -e '.[test,backends]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/rankserve serve

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(STAMP)
	$(PY) -m bench.scoring
	$(PY) -m bench.search
