# ferry: `make demo` runs the demo plans on embedded defaults; `make test` runs the suite.
# Both build what they need (.venv, Node test servers) on a fresh machine.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Every version .venv installs, pinned: a fresh machine gets what the suite last passed with.
LOCK := constraints.txt

.PHONY: demo test bench lint lock servers controlplane clean

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c $(LOCK) -e '.[dev,dask]'
	touch $(STAMP)

# Resolve pyproject.toml's ranges afresh in a throw-away venv and pin the result; review the diff, then commit it.
lock:
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(PYTHON) -m venv "$$tmp/venv" && \
	"$$tmp/venv/bin/python" -m pip install --quiet --upgrade pip && \
	"$$tmp/venv/bin/python" -m pip install --quiet -e '.[dev,dask,kubernetes-worker]' && \
	"$$tmp/venv/bin/python" -m pip freeze --exclude-editable > "$$tmp/freeze" && \
	{ echo "# Written by \`make lock\` from pyproject.toml for: pip install -c $(LOCK) -e '.[dev,dask,kubernetes-worker]'. Not by hand."; \
	  grep -v '^ferry[ =@]' "$$tmp/freeze"; } > $(LOCK)

node_modules/.bin/azurite-blob: package.json
	npm install --no-audit --no-fund --silent
	touch $@

servers: node_modules/.bin/azurite-blob

# The test control plane (etcd, kube-apiserver, controller-manager, scheduler, kubectl, kwok) built from the Go
# sources tests/controlplane/sources.toml pins, once per version, into ~/.cache/ferry/controlplane.
controlplane: $(STAMP)
	$(PY) -m tests.controlplane.build

demo: $(STAMP)
	$(PY) -m examples.demo

# One worker more than the machine has cores (at most 4): many tests wait on a server, a timer or a child process,
# and a third worker on two cores uses that time. Each worker has its own servers; a file's tests stay on one.
WORKERS := $(shell $(PYTHON) -c 'import os; print(min(4, (os.cpu_count() or 1) + 1))')
test: $(STAMP) servers controlplane
	$(PY) -m pytest -q -n $(WORKERS) --dist loadfile

bench: $(STAMP) servers
	$(PY) -m bench.run
	$(PY) -m bench.resume
	$(PY) -m bench.scale
	$(PY) -m bench.quote

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) node_modules .ferry bench/out
