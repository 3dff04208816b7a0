# make demo / make test do all their own set-up (packages, .venv, local services), idempotently.
SHELL := /bin/bash
VENV := .venv/bin
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: install up down status test unit demo airflow merge verify bench load chaos soak growth bulk lock clean \
	cluster cluster-down cluster-faults bench-cluster executor-env test-full

# These run against the local services of `make up`: settings left unset (connections, staging and
# warehouse roots) fall back to them. Elsewhere dblog refuses to guess and names what to set.
test unit demo airflow merge verify bench load chaos soak growth bulk cluster-faults bench-cluster: export DBLOG_LOCAL = 1

install:
	@bash scripts/install.sh

up: install
	@bash scripts/services.sh up

down:
	@bash scripts/cluster.sh down
	@bash scripts/services.sh down

status:
	@bash scripts/services.sh status

# The fast checks (seconds), run first by `make unit` and `make test` (so CI): ruff's rules and
# mypy's files are in pyproject.toml.
LINT := $(VENV)/ruff check --quiet include plugins dags spark_jobs tests bench scripts && $(VENV)/mypy

# The suite, one test at a time (a two-worker run measured no faster on these 2 cores: the suite
# is CPU-bound; tests marked `alone` restart or reconfigure a shared service and need a serial
# run). It ends with its time against the 30-minute budget and its slowest tests.
TEST_OUT := .local/test-output
test: up
	$(LINT)
	@rm -f $(TEST_OUT)/junit*.xml
	$(VENV)/pytest -q --junitxml=$(TEST_OUT)/junit.xml; a=$$?; \
	  $(VENV)/python scripts/suite_time.py $(TEST_OUT); exit $$a

# Every test: those of the `src` fixture on both sources (the suite runs each on one, alternating,
# unless marked both_sources) and those marked long. Before a release, or after a change to a
# source adapter.
test-full: export DBLOG_SUITE = full
test-full: test

unit: install
	$(LINT)
	$(VENV)/pytest -q -m "not integration"

demo: up
	$(VENV)/python scripts/demo.py

airflow: up
	@bash scripts/airflow.sh

merge: up
	$(VENV)/dblog merge

verify: up
	$(VENV)/dblog verify --source dblog_mariadb && $(VENV)/dblog verify --source dblog_postgres

bench: up
	$(VENV)/python bench/run.py

# make chaos [RUNS=4] [SECONDS=120] [SOURCES=mariadb,postgres] [SEED=n: replay that run]
#            [LEGACY=1: writes logged without rows too] [MERGE=batch|continuous|both]
chaos: up
	RUNS=$(RUNS) CHAOS_SECONDS=$(SECONDS) SOURCES=$(SOURCES) SEED=$(SEED) LEGACY=$(LEGACY) MERGE=$(MERGE) \
		$(VENV)/python scripts/chaos.py

# The long forms below run every case of their tests (both sources: see test-full).
soak growth bulk: export DBLOG_SUITE = full

# make soak [SOAK_SECONDS=1800]: the capture under a real airflow standalone, slices of 20 s, writes, a kill -9
SOAK_SECONDS ?= 1800
soak: up
	DBLOG_SOAK_SECONDS=$(SOAK_SECONDS) $(VENV)/pytest -q -s tests/e2e/test_capture_soak.py -k hands_over

# make growth [COMMITS=2000]: thousands of commits with maintenance every eighth; snapshots, files and metadata stay bounded
growth: up
	DBLOG_GROWTH_COMMITS=$(or $(COMMITS),2000) $(VENV)/pytest -q -s tests/engine/test_snapshot_growth.py

# make bulk [BULK_ROWS=2000000]: one transaction of that many rows on each source, captured under a 300 MiB limit, a kill -9 mid-way
bulk: up
	DBLOG_BULK_ROWS=$(or $(BULK_ROWS),2000000) $(VENV)/pytest -q -s tests/engine/test_bulk_transactions.py -k too_big

load: up
	PYTHONPATH=include $(VENV)/python bench/load.py

# make cluster: the deployment beyond one process on loopback (scripts/cluster.sh: a ZooKeeper
# ensemble, a Spark standalone master and two workers, Redis, SeaweedFS, Airflow on the
# CeleryExecutor with two workers) capturing the sample tables, with the executors' packed
# environment; `scripts/cluster.sh env` prints the settings that point dblog at it.
cluster: up executor-env
	@DBLOG_LOCAL=1 PYTHONPATH=include $(VENV)/python -m dblog_dev.sample
	@bash scripts/cluster.sh up

cluster-down:
	@bash scripts/cluster.sh down

# make cluster-faults: the cluster test's long form (tests/spark/test_cluster.py): 2,000-row tables
# under 100 writes/s per source, a Celery worker, the ZooKeeper leader, a Spark worker mid-window
# and one mid-merge killed, the S3 server restarted; figures in .local/test-output/cluster-handovers.json
# make bench-cluster: dump rows/s and merge time on one Spark worker against two (bench/cluster_bench.py)
bench-cluster: up executor-env
	$(VENV)/python bench/cluster_bench.py

cluster-faults: up executor-env
	DBLOG_CLUSTER_FAULTS=all $(VENV)/pytest -q -s -p no:cacheprovider tests/spark/test_cluster.py

executor-env: install
	@bash scripts/executor_env.sh

lock:
	uv pip compile requirements.in --override overrides.txt --python-version 3.11 -o requirements.txt

clean: down
	rm -rf .local
