#!/usr/bin/env bash
# `make airflow`: `airflow standalone` on 127.0.0.1 with this project's DAGs and plugins, the local
# services as connections (dblog_mariadb, dblog_postgres, dblog_zookeeper, spark_default), one dump
# pool per source and the sample tables. State lives under .local/airflow. Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(PYTHONPATH=plugins:include .venv/bin/python -m dblog_airflow.local)"
airflow db migrate >/dev/null
IFS=, read -ra sources <<<"${DBLOG_SOURCES:-dblog_mariadb,dblog_postgres}"
for s in "${sources[@]}"; do
  airflow pools set "dblog_dump_$s" "${DBLOG_DUMP_POOL_SLOTS:-2}" "concurrent table dumps on $s" >/dev/null
done
python -m dblog.cli setup
python -m dblog_dev.sample
cat <<MSG

  Airflow:  $AIRFLOW__API__BASE_URL   login: admin / admin
  DAGs:     dblog_capture (runs continuously), dblog_dump (Trigger with params), dblog_merge,
            dblog_full_refresh, dblog_verify, dblog_dump_control
  Logs:     .local/airflow/logs      Warehouse: $DBLOG_WAREHOUSE

MSG
exec airflow standalone
