#!/bin/bash
# Runs in the mariadb image's first start: the capture user from scripts/sql/mariadb.sql (mounted at
# /dblog-sql), with the password from DBLOG_PASSWORD (on stdin, never in a file or an argument).
set -euo pipefail
{ printf "SET @dblog_password = '%s';\n" "${DBLOG_PASSWORD:?set DBLOG_PASSWORD}"; cat /dblog-sql/mariadb.sql; } \
  | docker_process_sql
