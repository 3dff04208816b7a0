#!/usr/bin/env bash
# The deployment beyond one process, on loopback (`make cluster`, `make cluster-down`):
#   - a three-node ZooKeeper ensemble (client ports 2281-2283),
#   - a Spark standalone cluster from the pyspark wheel: a master (7177) and two workers, each
#     with 1 core, 1 GB and a work directory of its own,
#   - Redis for Celery's broker (6479),
#   - SeaweedFS (S3) from scripts/services.sh, for the staged log and the warehouse,
#   - Airflow with the CeleryExecutor: api-server (8193), scheduler, dag-processor, triggerer and two
#     Celery workers, each process in a directory of its own, metadata on the local PostgreSQL.
# Data under .local/cluster/. `cluster.sh env` prints the settings a deployment on it uses.
# Airflow's processes take dblog's settings from the caller's environment (its connections,
# DBLOG_SOURCES, DBLOG_*), over the cluster's defaults (python -m dblog_airflow.local --celery).
#   scripts/cluster.sh up|down|status|env|start NAME|stop NAME|kill NAME
#   NAME: zk1..zk3, worker1..2, master, redis, airflow (all its processes), or one of them:
#   api-server, scheduler, dag-processor, triggerer, celery1, celery2. `kill` is kill -9 of the group.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOCAL=${DBLOG_LOCAL_DIR:-$ROOT/.local}
C=$LOCAL/cluster
ZK_BASE=${DBLOG_CLUSTER_ZK_PORT:-2281}      # zkN: client ZK_BASE+N-1, peer ZK_BASE+26599+N, election +10000
SPARK_PORT=${DBLOG_CLUSTER_SPARK_PORT:-7177}
REDIS_PORT=${DBLOG_CLUSTER_REDIS_PORT:-6479}
AIRFLOW_PORT=${DBLOG_CLUSTER_AIRFLOW_PORT:-8193}
WORKER_CORES=${DBLOG_CLUSTER_WORKER_CORES:-1}   # cores of each Spark worker
AIRFLOW_DB=${DBLOG_CLUSTER_AIRFLOW_DB:-airflow_cluster}
AIRFLOW_PARTS="api-server scheduler dag-processor triggerer celery1 celery2"
SPARK_HOME=$("$ROOT/.venv/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
export SPARK_HOME
export SPARK_LOCAL_IP=127.0.0.1   # master, workers and their executors bind loopback only

log() { printf '[cluster] %s\n' "$*"; }
die() { printf '[cluster] error: %s\n' "$*" >&2; exit 1; }
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
alive() { [ -f "$1" ] && kill -0 "$(head -n1 "$1")" 2>/dev/null; }
wait_for() {  # wait_for NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  for _ in $(seq $((secs * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "$name did not become ready in ${secs}s; see its log under $C"
}
session_pids() {  # every process of the session started under setsid (Airflow's task runners have
  ps -eo pid=,sid= | awk -v s="$1" '$2 == s {print $1}'   # groups of their own in it)
}
stop_group() {  # stop_group NAME PIDFILE: the session started under setsid
  alive "$2" || return 0
  local pid; pid=$(head -n1 "$2")
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"
  for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  local left; left=$(session_pids "$pid")
  if kill -0 "$pid" 2>/dev/null || [ -n "$left" ]; then
    session_pids "$pid" | xargs -r kill -KILL 2>/dev/null || true
    rm -f "$2"; log "$1 killed"
  else
    rm -f "$2"; log "$1 stopped"
  fi
}

zk_hosts() { echo "127.0.0.1:$ZK_BASE,127.0.0.1:$((ZK_BASE + 1)),127.0.0.1:$((ZK_BASE + 2))"; }
zk_up() {  # zk_up N
  local n=$1 dir=$C/zk$1 port=$((ZK_BASE + $1 - 1))
  alive "$dir/zk.pid" && return 0
  port_busy "$port" && die "port $port is taken by another process; set DBLOG_CLUSTER_ZK_PORT"
  mkdir -p "$dir/data"
  echo "$n" >"$dir/data/myid"
  cat >"$dir/zoo.cfg" <<CFG
tickTime=500
initLimit=20
syncLimit=5
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,mntr
maxSessionTimeout=60000
maxClientCnxns=200
$(for i in 1 2 3; do p=$((ZK_BASE + 26599 + i)); echo "server.$i=127.0.0.1:$p:$((p + 10000))"; done)
CFG
  setsid java -Xmx192m -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" </dev/null >"$dir/zk.log" 2>&1 &
  echo $! >"$dir/zk.pid"
}
zk_serving() {  # a node that is part of a quorum answers `srvr` with its mode
  timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; printf srvr >&3; grep -q 'Mode: \(leader\|follower\)' <&3"
}
ensemble_up() {
  for n in 1 2 3; do zk_up "$n"; done
  for n in 1 2 3; do wait_for "zookeeper node $n" 60 zk_serving $((ZK_BASE + n - 1)); done
  log "zookeeper ensemble up on $(zk_hosts)"
}

master_up() {
  alive "$C/spark/master.pid" && return 0
  port_busy "$SPARK_PORT" && die "port $SPARK_PORT is taken by another process; set DBLOG_CLUSTER_SPARK_PORT"
  mkdir -p "$C/spark"
  SPARK_LOG_DIR=$C/spark setsid "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
    --host 127.0.0.1 --port "$SPARK_PORT" --webui-port $((SPARK_PORT + 1003)) \
    </dev/null >"$C/spark/master.log" 2>&1 &
  echo $! >"$C/spark/master.pid"
  wait_for "spark master" 60 port_busy "$SPARK_PORT"
}
worker_up() {  # worker_up N: its own work directory (application files, executor logs) and nothing else
  local n=$1 dir=$C/spark/worker$1
  alive "$dir/worker.pid" && return 0
  mkdir -p "$dir/work" "$dir/tmp"
  # SPARK_LOCAL_DIRS: shuffle and block files stay in the worker's own directory too.
  SPARK_LOCAL_DIRS=$dir/tmp SPARK_WORKER_DIR=$dir/work setsid "$SPARK_HOME/bin/spark-class" \
    org.apache.spark.deploy.worker.Worker "spark://127.0.0.1:$SPARK_PORT" --host 127.0.0.1 \
    --cores "$WORKER_CORES" --memory 1g --work-dir "$dir/work" --webui-port $((SPARK_PORT + 1003 + n)) \
    </dev/null >"$dir/worker.log" 2>&1 &
  echo $! >"$dir/worker.pid"
}
workers_registered() {  # the master's page lists every worker ALIVE
  [ "$(curl -fsS "http://127.0.0.1:$((SPARK_PORT + 1003))/json/" | "$ROOT/.venv/bin/python" -c \
    'import json, sys; print(sum(w["state"] == "ALIVE" for w in json.load(sys.stdin)["workers"]))')" -ge "$1" ]
}
spark_up() {
  master_up
  for n in 1 2; do worker_up "$n"; done
  wait_for "two spark workers" 90 workers_registered 2
  log "spark master up on spark://127.0.0.1:$SPARK_PORT with 2 workers ($WORKER_CORES core(s), 1 GB each)"
}

redis_up() {
  alive "$C/redis/redis.pid" && return 0
  port_busy "$REDIS_PORT" && die "port $REDIS_PORT is taken by another process; set DBLOG_CLUSTER_REDIS_PORT"
  mkdir -p "$C/redis"
  setsid redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$C/redis" --save '' --appendonly no \
    </dev/null >"$C/redis/redis.log" 2>&1 &
  echo $! >"$C/redis/redis.pid"
  wait_for redis 30 bash -c "exec 3<>/dev/tcp/127.0.0.1/$REDIS_PORT; printf 'PING\r\n' >&3; head -c5 <&3 | grep -q PONG"
  log "redis up on 127.0.0.1:$REDIS_PORT"
}

airflow_env() {
  local out
  out=$(PYTHONPATH="$ROOT/plugins:$ROOT/include" "$ROOT/.venv/bin/python" -m dblog_airflow.local --celery \
    --home "$C/airflow" --port "$AIRFLOW_PORT" --broker "redis://127.0.0.1:$REDIS_PORT/0" \
    --spark-master "spark://127.0.0.1:$SPARK_PORT" --zookeeper "$(zk_hosts)" --database "$AIRFLOW_DB") \
    || die "the cluster's Airflow settings failed (is PostgreSQL up? make up)"
  # shellcheck disable=SC1090
  eval "$out"
}
airflow_part_up() {  # airflow_part_up NAME: one Airflow process, in its own directory
  local name=$1 dir=$C/airflow/$1
  alive "$dir/pid" && return 0
  local args
  case "$name" in
    api-server|scheduler|dag-processor) args=("$name") ;;
    triggerer) args=(triggerer --skip-serve-logs) ;;
    # -s: no log server (it would listen on every interface); the api-server reads the task logs
    # from the log folder (on separate hosts: remote logging, docs/cluster.md).
    celery[12]) args=(celery worker -H "$name@%h" -s) ;;
    *) die "no Airflow process $name" ;;
  esac
  mkdir -p "$dir/tmp"
  (cd "$dir" || exit
   # each worker under its own name, as on hosts of their own (the task instances' hostname)
   case "$name" in celery*) export AIRFLOW__CORE__HOSTNAME_CALLABLE=dblog_airflow.local.worker_hostname \
                                    DBLOG_WORKER_NAME=$name ;; esac
   TMPDIR=$dir/tmp setsid "$ROOT/.venv/bin/airflow" "${args[@]}" </dev/null >>"$dir/$name.log" 2>&1 &
   echo $! >"$dir/pid")
}
api_healthy() { curl -fsS "http://127.0.0.1:$AIRFLOW_PORT/api/v2/monitor/health" >/dev/null; }
airflow_up() {
  port_busy "$AIRFLOW_PORT" && ! alive "$C/airflow/api-server/pid" && \
    die "port $AIRFLOW_PORT is taken by another process; set DBLOG_CLUSTER_AIRFLOW_PORT"
  airflow_env
  "$ROOT/.venv/bin/airflow" db migrate >"$C/airflow/migrate.log" 2>&1 || die "airflow db migrate failed; see $C/airflow/migrate.log"
  IFS=, read -ra sources <<<"${DBLOG_SOURCES:-dblog_mariadb,dblog_postgres}"
  for s in "${sources[@]}"; do
    "$ROOT/.venv/bin/airflow" pools set "dblog_dump_$s" "${DBLOG_DUMP_POOL_SLOTS:-2}" "concurrent table dumps on $s" >/dev/null
  done
  "$ROOT/.venv/bin/python" -m dblog.cli setup >"$C/airflow/setup.log" 2>&1 || die "dblog setup failed; see $C/airflow/setup.log"
  for part in $AIRFLOW_PARTS; do airflow_part_up "$part"; done
  wait_for "airflow api-server" 180 api_healthy
  log "airflow up on http://127.0.0.1:$AIRFLOW_PORT (CeleryExecutor, 2 workers; admin / admin)"
}
airflow_down() {  # every part at once: each gets its 20 s to end before it is killed
  for part in $AIRFLOW_PARTS; do stop_group "airflow $part" "$C/airflow/$part/pid" & done
  wait
}

kill_group() {  # kill_group NAME PIDFILE: kill -9 of its whole session, as a crashed host would
  alive "$2" || die "$1 is not running"
  session_pids "$(head -n1 "$2")" | xargs -r kill -KILL 2>/dev/null || true
  rm -f "$2"; log "$1 killed (-9)"
}
pidfile() {
  case "${1:-}" in
    zk[123]) echo "$C/$1/zk.pid" ;;
    worker[12]) echo "$C/spark/$1/worker.pid" ;;
    master) echo "$C/spark/master.pid" ;;
    redis) echo "$C/redis/redis.pid" ;;
    api-server|scheduler|dag-processor|triggerer|celery[12]) echo "$C/airflow/$1/pid" ;;
    *) die "no cluster process ${1:-}; use zk1..zk3, worker1, worker2, master, redis, airflow or one of: $AIRFLOW_PARTS" ;;
  esac
}

one() {  # one up|down NAME
  case "${2:-}" in
    zk[123]) [ "$1" = up ] && zk_up "${2#zk}" || stop_group "zookeeper node ${2#zk}" "$C/$2/zk.pid" ;;
    worker[12]) [ "$1" = up ] && worker_up "${2#worker}" || stop_group "spark worker ${2#worker}" "$C/spark/$2/worker.pid" ;;
    master) [ "$1" = up ] && master_up || stop_group "spark master" "$C/spark/master.pid" ;;
    redis) [ "$1" = up ] && redis_up || stop_group redis "$C/redis/redis.pid" ;;
    airflow) [ "$1" = up ] && airflow_up || airflow_down ;;
    api-server|scheduler|dag-processor|triggerer|celery[12])
      if [ "$1" = up ]; then airflow_env; airflow_part_up "$2"; else stop_group "airflow $2" "$C/airflow/$2/pid"; fi ;;
    *) die "usage: $0 start|stop|kill zk1|zk2|zk3|worker1|worker2|master|redis|airflow|$(echo "$AIRFLOW_PARTS" | tr ' ' '|')" ;;
  esac
}

case "${1:-}" in
  # DBLOG_CLUSTER_AIRFLOW=0: everything but Airflow (a test starts it with its own settings).
  up) bash scripts/services.sh start seaweedfs; ensemble_up; spark_up; redis_up
      [ "${DBLOG_CLUSTER_AIRFLOW:-1}" = 0 ] || airflow_up ;;
  down)
    airflow_down
    for n in 1 2; do stop_group "spark worker $n" "$C/spark/worker$n/worker.pid"; done
    stop_group "spark master" "$C/spark/master.pid"
    for n in 1 2 3; do stop_group "zookeeper node $n" "$C/zk$n/zk.pid"; done
    stop_group redis "$C/redis/redis.pid" ;;
  start) one up "${2:-}" ;;
  stop) one down "${2:-}" ;;
  kill)
    if [ "${2:-}" = airflow ]; then for part in $AIRFLOW_PARTS; do kill_group "airflow $part" "$C/airflow/$part/pid"; done
    else pf=$(pidfile "${2:-}") || exit 1; kill_group "${2:-}" "$pf"; fi ;;
  env)   # for `eval "$(scripts/cluster.sh env)"`; the ensemble in Airflow's JSON form (Airflow's URI parser takes one host)
    PYTHONPATH="$ROOT/plugins:$ROOT/include" "$ROOT/.venv/bin/python" -m dblog_airflow.local --ensemble \
      --zookeeper "$(zk_hosts)"
    echo "export DBLOG_SPARK_MASTER=spark://127.0.0.1:$SPARK_PORT"
    echo "export SPARK_LOCAL_IP=127.0.0.1"   # (a driver on this machine: loopback too)
    echo "export DBLOG_CELERY_BROKER=redis://127.0.0.1:$REDIS_PORT/0"
    echo "export AIRFLOW__API__BASE_URL=http://127.0.0.1:$AIRFLOW_PORT" ;;
  status)
    for n in 1 2 3; do alive "$C/zk$n/zk.pid" && echo "zookeeper node $n up :$((ZK_BASE + n - 1))" \
      || echo "zookeeper node $n down"; done
    alive "$C/spark/master.pid" && echo "spark master up :$SPARK_PORT" || echo "spark master down"
    for n in 1 2; do alive "$C/spark/worker$n/worker.pid" && echo "spark worker $n up" || echo "spark worker $n down"; done
    alive "$C/redis/redis.pid" && echo "redis up :$REDIS_PORT" || echo "redis down"
    for part in $AIRFLOW_PARTS; do alive "$C/airflow/$part/pid" && echo "airflow $part up" || echo "airflow $part down"; done ;;
  *) echo "usage: $0 up|down|status|env|start NAME|stop NAME|kill NAME" >&2; exit 2 ;;
esac
