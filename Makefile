# ferry: `make demo` runs the main job on embedded defaults; `make test` runs the suite.
# Both build what they need (.venv, Node test servers) on a fresh machine.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint servers clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

node_modules/.bin/azurite-blob: package.json
	npm install --no-audit --no-fund --silent
	touch $@

servers: node_modules/.bin/azurite-blob

demo: $(STAMP)
	$(PY) -m examples.demo

test: $(STAMP) servers
	$(PY) -m pytest -q

bench: $(STAMP) servers
	$(PY) -m bench.run
	$(PY) -m bench.resume

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) node_modules .ferry bench/out
