#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian/Ubuntu machine (root, no Docker): Debian packages for the
# local services, then .venv from the pinned lock. Re-running does only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '[install] %s\n' "$*"; }

need=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
[ -x /usr/bin/chromium ] || need+=(chromium)  # the UI test's browser (playwright drives it)
# mysqlclient (the MariaDB driver, C) builds against these
[ -f /usr/include/mariadb/mysql.h ] || need+=(libmariadb-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
# make bench: the JDBC drivers of the Spark baseline (a parallel JDBC read, what a Spark user tries first)
[ -f /usr/share/java/mariadb-java-client.jar ] || need+=(libmariadb-java)
[ -f /usr/share/java/postgresql.jar ] || need+=(libpostgresql-jdbc-java)
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "[install] need root to apt-get install ${need[*]}" >&2; exit 1; }
  log "apt-get install ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # --no-upgrade: never bump a preinstalled server; the services we start are private instances.
  apt-get install -y -qq --no-upgrade "${need[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if ! command -v uv >/dev/null 2>&1; then
  log "installing uv"
  "$PY" -m pip install -q uv
fi
stamp=.venv/.lock-sha
want=$( (cat requirements.txt pyproject.toml; echo compile-bytecode) | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "building .venv from requirements.txt"
  [ -x .venv/bin/python ] || uv venv -q --python "$PY" .venv
  # The lock is complete; --no-deps keeps pyspark-client (which overwrites pyspark) out.
  # Bytecode compiled once here (~15 s): with PYTHONDONTWRITEBYTECODE set, as in containers, every
  # process would otherwise compile what it imports (an Airflow task 3.6 s -> 1.6 s to import).
  uv pip sync -q --compile-bytecode --python .venv/bin/python requirements.txt
  uv pip install -q --python .venv/bin/python --no-deps -e .
  echo "$want" >"$stamp"
fi
# The project's own modules too (an editable install is not compiled): every dblog process would
# otherwise compile them at each start (a dump's CLI 0.69 -> 0.63 s). Only what changed is redone.
.venv/bin/python -m compileall -q -j 0 include plugins dags spark_jobs >/dev/null
bash scripts/services.sh secret  # the local capture user's password, generated once per checkout
log "ready: .venv ($(.venv/bin/python --version)), services: mariadb, postgresql, zookeeper; chromium"
