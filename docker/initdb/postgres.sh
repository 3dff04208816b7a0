#!/bin/bash
# Runs in the postgres image's first start: the capture role from scripts/sql/postgres.sql (mounted
# at /dblog-sql), with the password from DBLOG_PASSWORD (on stdin, never in a file or an argument).
set -euo pipefail
{ printf '\\set dblog_password %s\n' "'${DBLOG_PASSWORD:?set DBLOG_PASSWORD}'"; cat /dblog-sql/postgres.sql; } \
  | psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB"
