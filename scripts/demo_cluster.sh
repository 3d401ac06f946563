#!/usr/bin/env bash
# scripts/demo --cluster: a PostgreSQL primary (:25432) + synchronous standby (:25433) in a temp
# dir, the demo payment API (:9000) and two gateways (:8080, :8081) sharing the database.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
PGBIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
T="$(mktemp -d /tmp/idemgate-cluster-XXXXXX)"
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" -eq 0 ] && chown postgres "$T"
pids=()
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  for n in pg1 pg2; do as_pg "$PGBIN/pg_ctl" -D "$T/$n" -m immediate stop >/dev/null 2>&1 || true; done
  rm -rf "$T"
}
trap cleanup EXIT INT TERM
opts="-k $T -c listen_addresses=127.0.0.1 -c wal_level=replica -c max_wal_senders=5"
as_pg "$PGBIN/initdb" -D "$T/pg1" -U idemgate --auth=trust >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$T/pg1" -l "$T/pg1.log" -w -o "-p 25432 $opts" start >/dev/null
as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p 25432 -U idemgate -D "$T/pg2" -R -X stream \
  -d "application_name=standby1"
as_pg "$PGBIN/pg_ctl" -D "$T/pg2" -l "$T/pg2.log" -w -o "-p 25433 $opts" start >/dev/null
as_pg "$PGBIN/psql" -h 127.0.0.1 -p 25432 -U idemgate -d postgres -qc \
  "ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 (standby1)'" -c "SELECT pg_reload_conf()" \
  >/dev/null
DSN="host=127.0.0.1,127.0.0.1 port=25432,25433 user=idemgate dbname=postgres target_session_attrs=read-write"
for port in 8080 8081; do
  cat >"$T/gw$port.toml" <<TOML
[listen]
address = "127.0.0.1:$port"
[upstream]
url = "http://127.0.0.1:9000"
[store]
backend = "postgres"
[store.postgres]
dsn = "$DSN"
connections = 4
[admin]
address = ""
[log]
access = "stdout"
TOML
done
# The payment API writes its intents into the same database, fenced (docs/fencing.md).
build/demo-payment-api --port 9000 --pg-dsn "$DSN" & pids+=($!)
build/idemgate --config "$T/gw8080.toml" & pids+=($!)
build/idemgate --config "$T/gw8081.toml" & pids+=($!)
for _ in $(seq 50); do curl -s -o /dev/null localhost:8081/_demo/stats && break; sleep 0.1; done
cat <<TXT

Two gateways (:8080, :8081) share PostgreSQL: primary :25432, synchronous standby :25433 ($T).

  curl -si -X POST localhost:8080/v1/payment_intents \\
    -H 'Authorization: Bearer merchant-demo' -H 'Idempotency-Key: order-1001' \\
    -d '{"amount":"100000000"}'

  (the same command through :8081: the same bytes, plus Idempotent-Replayed: true and Age)

Kill the primary and promote the standby:

  $( [ "$(id -u)" -eq 0 ] && echo "runuser -u postgres -- ")$PGBIN/pg_ctl -D $T/pg1 -m immediate stop
  $( [ "$(id -u)" -eq 0 ] && echo "runuser -u postgres -- ")$PGBIN/pg_ctl -D $T/pg2 promote

  (the same retry through either gateway: still replayed; no gateway was restarted)

  curl -s localhost:9000/_demo/stats  (how many times the payment API executed)

The payment API keeps its intents in the same database and calls idemgate_fence in the
transaction that creates each one (docs/fencing.md):

  psql -h 127.0.0.1 -p 25432 -U idemgate -d postgres -c 'SELECT * FROM demo_intents'

Ctrl-C stops everything and removes $T.
TXT
wait -n "${pids[@]}"
