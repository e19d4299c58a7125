# Two commands for a newcomer: `make lab` and `make test`.
# Each creates .venv on first use and (re)installs meshroute into it
# whenever its sources change.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SOURCES := setup.cfg pyproject.toml $(shell find meshroute twisted -name '*.py' -o -name '*.sql' 2>/dev/null)

.PHONY: lab test run simulate install clean audit-cluster

install: $(VENV)/.installed

$(VENV)/.installed: $(SOURCES)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip setuptools wheel
	$(PY) -m pip install -q --disable-pip-version-check '.[test,audit]'
	touch $@

# One router in the foreground: make run CONFIG=etc/router.toml
CONFIG ?= etc/router.toml
run: install
	$(VENV)/bin/twistd -n --pidfile= meshroute --config $(CONFIG)

lab: install
	$(PY) -m meshroute.lab etc/lab

test: install
	MESHROUTE_TEST_INSTALLED=1 $(PY) -m pytest $(PYTEST_ARGS)

# The seeded fault simulation (docs/simulation.md): RUNS schedules from
# SEED; a failure prints its seed and its shrunk schedule.
SEED ?= 0
RUNS ?= 1000
simulate: install
	PYTHONPATH=tests $(PY) -m simulation --seed $(SEED) --runs $(RUNS) $(SIMULATE_ARGS)

# The audit of EVENTS (default: the lab's logs) on a Spark standalone
# cluster of two one-core workers on 127.0.0.1, started from the pyspark
# installation and stopped after (meshroute/audit/standalone.py).
EVENTS ?= var/lab
audit-cluster: install
	$(PY) -m meshroute.audit.standalone --workers 2 -- $(EVENTS) --out $(EVENTS)/audit-cluster $(AUDIT_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info var .pytest_cache .hypothesis
