# Two commands for a newcomer: `make lab` and `make test`.
# Each creates .venv on first use and (re)installs meshroute into it
# whenever its sources change.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SOURCES := setup.cfg pyproject.toml $(shell find meshroute twisted -name '*.py' -o -name '*.sql' 2>/dev/null)

.PHONY: lab test test-slow run simulate install test-packages clean audit-cluster

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

# Debian packages some tests drive: headless Chromium for the browser tests
# (tests/support/browser.py), mosquitto_pub / mosquitto_sub for the MQTT
# tests.  Installed here where we can (root, with apt-get, from Debian's
# registry), and never a reason for the target to fail; where one is
# missing, its tests are skipped and say why.
# $(call debian_package,COMMAND,PACKAGE,WHAT IS SKIPPED WITHOUT IT)
define debian_package
	@command -v $(1) >/dev/null 2>&1 \
	  || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	       && echo "installing $(2) for $(3) (apt-get)" \
	       && { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) >/dev/null 2>&1 \
	            || { apt-get update -qq >/dev/null 2>&1 \
	                 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) >/dev/null 2>&1; }; }; } \
	  || echo "$(2) is not installed: $(3) will be skipped"
endef

test-packages:
	$(call debian_package,chromium,chromium,the browser tests)
	$(call debian_package,mosquitto_pub,mosquitto-clients,the mosquitto_pub/mosquitto_sub tests)

# Two workers (pytest-xdist), each taking whole test files, the slowest
# first (tests/conftest.py orders them).
PYTEST_WORKERS ?= -n 2 --dist loadfile --no-loadscope-reorder --durations=30
# The layers (.importlinter, docs/architecture.md) first: an import that
# points up the stack fails the target before any test runs.
test: install test-packages
	$(VENV)/bin/lint-imports --no-cache
	MESHROUTE_TEST_INSTALLED=1 $(PY) -m pytest $(PYTEST_WORKERS) -m "not slow" $(PYTEST_ARGS)

# The longest runs (marked slow: the audit's streaming and standalone-cluster
# tests at length, 200,000 messages through rotating event files, HA
# restarts in either order and ten failback cycles with their audits, the
# fault simulation's further seeds; some 25 minutes on two cores), apart so
# that `make test` stays under 20; CI (.ci/run) runs both.
test-slow: install
	MESHROUTE_TEST_INSTALLED=1 $(PY) -m pytest $(PYTEST_WORKERS) -m slow $(PYTEST_ARGS)

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
