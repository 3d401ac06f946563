#!/usr/bin/env bash
# The container image, run for real (podman, host network, a read-only root filesystem, the store
# on a named volume, the config mounted read-only): the demo transcript through the container
# (201, the replay with the same bytes, 422), the healthcheck, the non-root user, kill -9 of the
# container and a new one on the same volume (the answer is still replayed, the payment API
# executed once), and SIGTERM draining a request in flight (it gets its 201, the exit code is 0).
# Prints the image size and the start time (podman run to /healthz 200). Exit 77 (skipped) when
# podman cannot run here.
# usage: image_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$1" build="$2"
name="idemgate-test-$$" vol="idemgate-test-$$"
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; dump; exit 1; }
dump() { pod logs "$name" 2>&1 | tail -30 >&2 || true; }
[ "$(id -u)" -eq 0 ] || skip "needs root (podman with its own storage)"
exec 9>/tmp/idemgate-image-test.lock
flock 9  # one image test per machine at a time (ports, the shared storage)
(source "$src/scripts/lib.sh" && ensure_packages podman runc mmdebstrap) || skip "cannot install podman"

image() { "$src/scripts/image" --build "$build" "$@"; }
pod() { image --podman "$@"; }
pod info >/dev/null 2>&1 || skip "podman cannot run here"
t0=$(date +%s.%N)
tag="$(image)" || fail "scripts/image did not build the image"
t_build=$(date +%s.%N)
size="$(pod image inspect --format '{{.Size}}' "$tag")"

tmp="$(mktemp -d)"
api_pid=""
cleanup() {
  pod rm -f -t 0 "$name" >/dev/null 2>&1 || true
  pod volume rm -f "$vol" >/dev/null 2>&1 || true
  [ -n "$api_pid" ] && kill "$api_pid" 2>/dev/null && wait "$api_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up_port=$(free_port) gw_port=$(free_port) admin_port=$(free_port)
"$build/demo-payment-api" --port "$up_port" --delay-ms 0 >"$tmp/api.log" 2>&1 &
api_pid=$!
cat >"$tmp/idemgate.toml" <<EOF
[listen]
address = "127.0.0.1:$gw_port"
[upstream]
url = "http://127.0.0.1:$up_port"
[store]
path = "/var/lib/idemgate/data"
[server]
workers = 1
shutdown_grace = "20s"
[admin]
address = "127.0.0.1:$admin_port"
EOF
chmod 0644 "$tmp/idemgate.toml"
pod volume create "$vol" >/dev/null

start() {
  local t=$(date +%s.%N)
  pod run -d --name "$name" --network host --read-only -e IDEMGATE_ADMIN_PORT="$admin_port" \
    -v "$vol:/var/lib/idemgate" -v "$tmp/idemgate.toml:/etc/idemgate/idemgate.toml:ro" \
    "$tag" >/dev/null 2>>"$tmp/podman.err" || { cat "$tmp/podman.err" >&2; fail "podman run"; }
  for _ in $(seq 200); do
    curl -sf -o /dev/null "http://127.0.0.1:$admin_port/healthz" && break
    sleep 0.05
  done
  curl -sf -o /dev/null "http://127.0.0.1:$admin_port/healthz" || fail "no /healthz 200"
  start_ms=$(python3 -c "print(round(($(date +%s.%N) - $t) * 1000))")
}
pay() {  # pay KEY AMOUNT OUT: the demo's POST; prints the status, headers and body in OUT
  curl -s -D "$2.h" -o "$2.b" -w '%{http_code}' -X POST "http://127.0.0.1:$gw_port/v1/payment_intents" \
    -H 'Authorization: Bearer merchant-demo' -H "Idempotency-Key: $1" -d "{\"amount\":\"$3\"}"
}
executions() { curl -s "http://127.0.0.1:$up_port/_demo/stats" | sed 's/.*"executions":\([0-9]*\).*/\1/'; }

start
first_start_ms=$start_ms
[ "$(pay order-1001 "$tmp/first" 100000000)" = 201 ] || fail "the first POST was not 201"
[ "$(pay order-1001 "$tmp/replay" 100000000)" = 201 ] || fail "the replay was not 201"
grep -qi '^Idempotent-Replayed: true' "$tmp/replay.h" || fail "the replay lacks Idempotent-Replayed"
cmp -s "$tmp/first.b" "$tmp/replay.b" || fail "the replay's body differs from the first"
[ "$(pay order-1001 "$tmp/other" 999000000)" = 422 ] || fail "another amount under the key: not 422"
[ "$(executions)" = 1 ] || fail "the payment API executed $(executions) times, want 1"
echo "demo transcript through the container: 201, replay, 422; executed once"

pod healthcheck run "$name" >/dev/null || fail "podman healthcheck run failed"
[ "$(pod exec "$name" id -un)" = idemgate ] || fail "the gateway does not run as idemgate"
[ "$(pod inspect --format '{{.Config.User}}' "$name")" = idemgate ] || fail "the image's USER"
pod image inspect --format '{{.HealthCheck}}' "$tag" | grep -q healthz || fail "no HEALTHCHECK"
pod exec "$name" sh -c 'touch /usr/bin/x || touch /etc/x' 2>/dev/null && fail "the root fs is writable"
pod exec "$name" test -w /var/lib/idemgate/data || fail "the store volume is not writable"
echo "healthcheck OK; user idemgate; root filesystem read-only; store writable"

pod kill -s KILL "$name" >/dev/null
pod wait "$name" >/dev/null 2>&1 || true
# podman schedules periodic healthchecks with systemd timers; without systemd it logs that it
# cannot (podman healthcheck run above works either way): kept out of the output.
pod rm -f "$name" >/dev/null 2>>"$tmp/podman.err"
start
[ "$(pay order-1001 "$tmp/after" 100000000)" = 201 ] || fail "after kill -9: not 201"
grep -qi '^Idempotent-Replayed: true' "$tmp/after.h" || fail "after kill -9: not a replay"
cmp -s "$tmp/first.b" "$tmp/after.b" || fail "after kill -9: the body differs"
[ "$(executions)" = 1 ] || fail "after kill -9 the payment API executed $(executions) times"
echo "kill -9 and a new container on the same volume: still replayed, executed once"

# SIGTERM drains: a request in flight (the API answers in 1.5 s) still gets its 201.
kill "$api_pid"; wait "$api_pid" 2>/dev/null || true
"$build/demo-payment-api" --port "$up_port" --delay-ms 1500 >"$tmp/api.log" 2>&1 &
api_pid=$!
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$up_port/_demo/stats" && break; sleep 0.1; done
pay order-2002 "$tmp/drain" 5000 >"$tmp/drain.code" &
curl_pid=$!
sleep 0.5
pod stop -t 30 "$name" >/dev/null 2>>"$tmp/podman.err" || fail "podman stop"
wait "$curl_pid" || true
[ "$(cat "$tmp/drain.code")" = 201 ] || fail "the request in flight at SIGTERM got $(cat "$tmp/drain.code")"
[ "$(pod inspect --format '{{.State.ExitCode}}' "$name")" = 0 ] || fail "exit code after SIGTERM"
pod logs "$name" 2>&1 | grep -q 'stopped' || fail "no 'stopped' in the log"
echo "SIGTERM: the request in flight got 201, exit code 0"

t_end=$(date +%s.%N)
python3 - "$t0" "$t_build" "$t_end" "$size" "$first_start_ms" "$start_ms" <<'PY'
import sys
t0, tb, te, size, s1, s2 = map(float, sys.argv[1:])
print("image size %.1f MB; start (podman run to /healthz 200) %d ms, on the used volume %d ms; "
      "image build %.1f s, test %.1f s" % (size / 1e6, s1, s2, tb - t0, te - tb))
PY
echo "image test: OK"
