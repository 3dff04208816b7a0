# make demo / make test do all their own set-up (packages, .venv, local services), idempotently.
SHELL := /bin/bash
VENV := .venv/bin
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: install up down status test unit demo airflow merge verify bench load chaos lock clean

install:
	@bash scripts/install.sh

up: install
	@bash scripts/services.sh up

down:
	@bash scripts/services.sh down

status:
	@bash scripts/services.sh status

test: up
	$(VENV)/pytest -q --durations=25

unit: install
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
chaos: up
	RUNS=$(RUNS) CHAOS_SECONDS=$(SECONDS) SOURCES=$(SOURCES) SEED=$(SEED) $(VENV)/python scripts/chaos.py

load: up
	PYTHONPATH=include $(VENV)/python bench/load.py

lock:
	uv pip compile requirements.in --override overrides.txt --python-version 3.11 -o requirements.txt

clean: down
	rm -rf .local
