# The README's commands. Everything runs from a virtualenv in .venv that these targets create.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
REPORT_STAMP := $(VENV)/.installed-report

.PHONY: run test test-deps lint pytest bench report clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(RUN_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[test,spark,bench,deploy]'
	touch $@ $(RUN_STAMP) $(REPORT_STAMP)

$(REPORT_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[spark]'
	touch $@ $(RUN_STAMP)

## make run: start every service on embedded defaults (state in ./var), on 127.0.0.1; Ctrl-C stops all.
## `make run HOST=::` listens on every interface; `make run VERBOSE=1` logs every connection.
run: $(RUN_STAMP)
	$(PY) scripts/run_suite.py $(if $(HOST),--host $(HOST)) $(if $(VERBOSE),--verbose)

## make test: lint with ruff, then the whole pytest suite (unit, integration, interop)
test: $(TEST_STAMP) test-deps lint pytest

## the Debian tools the interop tests drive: installed when root, else named with the install command
test-deps:
	$(PY) scripts/test_deps.py

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check .

pytest: $(TEST_STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

## make bench: every side-by-side benchmark against the reference servers (each prints its table)
BENCHES := bench/mailbox.py bench/transit.py bench/packet_relay.py bench/stun.py bench/transfer.py bench/small_transfers.py \
           bench/dilation.py bench/messaging.py bench/spark.py
bench: $(TEST_STAMP)
	for b in $(BENCHES); do echo "== $$b"; $(PY) $$b || exit 1; done

## make report: the Spark report over the logs that `make run` wrote (needs Java 17 for Spark)
report: $(REPORT_STAMP)
	@command -v java >/dev/null || { echo "make report needs Java 17 for Spark: apt-get install -y openjdk-17-jre-headless" >&2; exit 1; }
	SPARK_LOCAL_IP=127.0.0.1 $(VENV)/bin/burrow-report --logs 'var/logs/*.jsonl' --out var/report

clean:
	rm -rf $(VENV) var build *.egg-info .pytest_cache .ruff_cache
