#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/demo --cluster: PostgreSQL the way production runs it, on this machine: one etcd
# (:23790), three PostgreSQL nodes (:25432-25434) each under Patroni (REST API :8008-8010) with
# synchronous_mode_strict, HAProxy (:25000) routing to the leader, the demo payment API (:9000)
# and two gateways: :8080 finds the primary by a libpq multi-host DSN, :8081 through HAProxy.
# Everything in a temp dir, stopped by Ctrl-C.
source "$(dirname "$0")/lib.sh"
ensure_packages "${PATRONI_PACKAGES[@]}"
cd "$ROOT"
PGBIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
T="$(mktemp -d "$( [ -w /dev/shm ] && echo /dev/shm || echo /tmp)/idemgate-cluster-XXXXXX")"
AS_PG=(); [ "$(id -u)" -eq 0 ] && AS_PG=(runuser -u postgres --)  # runuser forwards SIGTERM
[ "$(id -u)" -eq 0 ] && chown postgres "$T"
pids=()
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true  # Patroni stops its PostgreSQL on SIGTERM
  wait 2>/dev/null || true
  for n in 0 1 2; do  # a node whose Patroni was killed -9 left its PostgreSQL running
    kill -9 "$(head -1 "$T/node$n/postmaster.pid" 2>/dev/null)" 2>/dev/null || true
  done
  rm -rf "$T"
}
trap cleanup EXIT INT TERM

node_yaml() {  # node_yaml N: node N's Patroni configuration
  local n="$1" pg=$((25432 + $1)) rest=$((8008 + $1))
  cat <<YAML
scope: demo
name: node$n
restapi: {listen: "127.0.0.1:$rest", connect_address: "127.0.0.1:$rest"}
etcd3: {hosts: "127.0.0.1:23790"}
bootstrap:
  dcs:
    ttl: 20
    loop_wait: 5
    retry_timeout: 5
    primary_start_timeout: 0
    synchronous_mode: true
    synchronous_mode_strict: true
    postgresql:
      use_pg_rewind: true
      parameters: {synchronous_commit: "on", wal_log_hints: "on", max_connections: 100}
  initdb: [{auth: trust}, {username: idemgate}]
postgresql:
  listen: "127.0.0.1:$pg"
  connect_address: "127.0.0.1:$pg"
  data_dir: $T/node$n
  bin_dir: $PGBIN
  pgpass: $T/node$n.pgpass
  use_pg_rewind: true
  remove_data_directory_on_diverged_timelines: true
  authentication:
    superuser: {username: idemgate}
    replication: {username: idemgate}
    rewind: {username: idemgate}
  parameters: {unix_socket_directories: "$T"}
  pg_hba: [local all all trust, host all all 127.0.0.1/32 trust,
           host replication all 127.0.0.1/32 trust]
YAML
}

"${AS_PG[@]}" etcd --name demo --data-dir "$T/etcd" --listen-client-urls http://127.0.0.1:23790 \
  --advertise-client-urls http://127.0.0.1:23790 --listen-peer-urls http://127.0.0.1:23800 \
  --initial-advertise-peer-urls http://127.0.0.1:23800 --initial-cluster demo=http://127.0.0.1:23800 \
  >"$T/etcd.log" 2>&1 & pids+=($!)
for _ in $(seq 100); do curl -sf localhost:23790/health >/dev/null && break; sleep 0.1; done
for n in 0 1 2; do
  node_yaml "$n" >"$T/node$n.yml"
  "${AS_PG[@]}" patroni "$T/node$n.yml" >"$T/node$n.log" 2>&1 & pids+=($!)
  if [ "$n" -eq 0 ]; then  # node0 bootstraps the cluster; the others copy it
    for _ in $(seq 300); do curl -sf -X OPTIONS localhost:8008/primary >/dev/null && break; sleep 0.2; done
  fi
done
cat >"$T/haproxy.cfg" <<CFG
defaults
  mode tcp
  timeout connect 3s
  timeout client 30m
  timeout server 30m
  timeout check 2s
listen postgres
  bind 127.0.0.1:25000
  option httpchk OPTIONS /primary
  http-check expect status 200
  default-server inter 1s fall 2 rise 2 on-marked-down shutdown-sessions
  server node0 127.0.0.1:25432 check port 8008
  server node1 127.0.0.1:25433 check port 8009
  server node2 127.0.0.1:25434 check port 8010
CFG
haproxy -db -f "$T/haproxy.cfg" >"$T/haproxy.log" 2>&1 & pids+=($!)
echo "waiting for Patroni: a leader, a synchronous standby and a replica (see $T/node*.log)" >&2
for _ in $(seq 300); do
  sync=0; for r in 8008 8009 8010; do curl -sf localhost:$r/sync >/dev/null && sync=1; done
  [ "$sync" -eq 1 ] && [ "$("${AS_PG[@]}" "$PGBIN/psql" -h 127.0.0.1 -p 25000 -U idemgate -d postgres -XAtc \
    "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'" 2>/dev/null)" = 2 ] && break
  sleep 0.5
done
sleep 3  # HAProxy counts every server up until its checks fail: let them run

MULTI="host=127.0.0.1,127.0.0.1,127.0.0.1 port=25432,25433,25434 target_session_attrs=read-write"
for port in 8080 8081; do
  dsn="$MULTI"; [ "$port" = 8081 ] && dsn="host=127.0.0.1 port=25000"
  cat >"$T/gw$port.toml" <<TOML
[listen]
address = "127.0.0.1:$port"
[upstream]
url = "http://127.0.0.1:9000"
[store]
backend = "postgres"
[store.postgres]
dsn = "$dsn user=idemgate dbname=postgres connect_timeout=10"
connections = 4
[admin]
address = ""
[log]
access = "stdout"
TOML
done
# Kills the leader's Patroni and PostgreSQL (-9), as a crashed machine would.
cat >"$T/kill-leader" <<SH
#!/usr/bin/env bash
for n in 0 1 2; do
  if curl -sf -X OPTIONS localhost:\$((8008 + n))/primary >/dev/null; then
    kill -9 \$(pgrep -f "patroni $T/node\$n.yml") \$(head -1 $T/node\$n/postmaster.pid)
    echo "killed node\$n (the leader) at \$(date +%T)"; exit 0
  fi
done
echo "no leader right now"; exit 1
SH
chmod +x "$T/kill-leader"
main=()  # the demo ends when one of these exits (not when a node is killed)
# The payment API writes its intents into the same database, fenced (docs/fencing.md).
build/demo-payment-api --port 9000 --pg-dsn "$MULTI user=idemgate dbname=postgres" & main+=($!)
build/idemgate --config "$T/gw8080.toml" & main+=($!)
build/idemgate --config "$T/gw8081.toml" & main+=($!)
pids+=("${main[@]}")
for _ in $(seq 50); do curl -s -o /dev/null localhost:8081/_demo/stats && break; sleep 0.1; done
PCTL="$( [ "$(id -u)" -eq 0 ] && echo "runuser -u postgres -- ")patronictl -c $T/node0.yml"
cat <<TXT

Two gateways share a Patroni cluster (etcd :23790; PostgreSQL :25432-25434; files in $T):
:8080 follows the primary by libpq multi-host, :8081 through HAProxy (:25000).

  $PCTL list

  curl -si -X POST localhost:8080/v1/payment_intents \\
    -H 'Authorization: Bearer merchant-demo' -H 'Idempotency-Key: order-1001' \\
    -d '{"amount":"100000000"}'

  (the same command through :8081: the same bytes, plus Idempotent-Replayed: true and Age)

Kill the leader (its Patroni and PostgreSQL, -9) and watch Patroni promote the synchronous
standby by itself, about ttl + loop_wait (20 + 5 s) later:

  $T/kill-leader
  watch -n1 $PCTL list

  (meanwhile guarded requests wait or get 503; afterwards the same retry through either gateway
  is still replayed, and new keys get 201: no gateway was restarted)

A planned switchover: $PCTL switchover --force --candidate <the Sync Standby>
Bring the killed node back (it rejoins as a replica): $( [ "$(id -u)" -eq 0 ] && echo "runuser -u postgres -- ")patroni $T/nodeN.yml &

  curl -s localhost:9000/_demo/stats  (how many times the payment API executed)

The payment API keeps its intents in the same database and calls idemgate_fence in the
transaction that creates each one (docs/fencing.md):

  psql -h 127.0.0.1 -p 25000 -U idemgate -d postgres -c 'SELECT * FROM demo_intents'

Ctrl-C stops everything and removes $T.
TXT
wait -n "${main[@]}"
