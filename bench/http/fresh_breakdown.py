# SPDX-License-Identifier: Apache-2.0
# Where a fresh request's time goes at one connection, against its floor (a request through nginx
# plus two fdatasyncs), all measured in the same run. Per round: nginx proxying (wrk -t1 -c1), the
# fdatasync probe on the store's disk, then idemgate (workers = 1, store.sync = true) answering
# fresh keys; the gateway's /metrics before and after give the mean time of each phase of its
# requests: the claim and the completion (a worker's store call to its answer), inside each the
# group commit's synced write, and the upstream call. What the gateway spends outside the store
# calls and the upstream call, and what the client waits outside the gateway, are the rest.
# The floor is also measured end to end: nginx in front of an origin that makes two synced writes
# per request (synced_origin.c), where wrk and nginx idle through the syncs as wrk, the gateway
# and the origin do through a fresh request's; appended, as the probe's, and written over zeros,
# as the store's WAL is on ext4 and XFS. The same origin making none checks that it costs what
# nginx's origin does.
# --replay adds, in the same rounds, replays through the gateway and requests straight to the
# origin: an answer from memory with no proxy hop, the most a replay can gain over nginx's
# request at one connection.
# --busy-poll DURATION adds a second gateway with server.busy_poll = DURATION, measured in the
# same rounds: its fresh requests against the same floors, and its replays with --replay.
# Usage: python3 bench/http/fresh_breakdown.py --bin build/idemgate [--rounds 5] [--duration 5]
#   [--replay] [--busy-poll 400us]
import argparse
import os
import re
import statistics
import sys
import tempfile
import types
import urllib.request

import benchlib as B
import http_bench as H

REPLAY_KEYS = 1000  # keys completed before the rounds, which the replays cycle through
SERIES = {
    "request": ("idemgate_request_duration_seconds", 'outcome="fresh"'),
    "claim": ("idemgate_store_operation_duration_seconds", 'op="claim"'),
    "complete": ("idemgate_store_operation_duration_seconds", 'op="complete"'),
    "upstream": ("idemgate_upstream_duration_seconds", ""),
    "write": ("idemgate_store_write_duration_seconds", ""),
}


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for name, (family, labels) in SERIES.items():
        values = []
        for suffix in ("_sum", "_count"):
            pattern = re.escape(family + suffix) + (r"\{" + re.escape(labels) + r"\}" if labels
                                                   else "") + r" (\S+)"
            m = re.search("^" + pattern + "$", text, re.M)
            values.append(float(m.group(1)) if m else 0.0)
        out[name] = values
    return out


def mean_ms(before, after, name):
    s = after[name][0] - before[name][0]
    n = after[name][1] - before[name][1]
    return (s / n * 1e3 if n else 0.0), n


def start_gateway(procs, args, tmp, up_port, name="idemgate", busy_poll=""):
    """idemgate (workers = 1, synced store) with its admin port on, and server.busy_poll when
    given; (port, admin, proc, store)."""
    port, admin = B.free_ports(2)
    store = os.path.join(tmp, "store-" + name)
    conf = B.render("idemgate.toml", os.path.join(tmp, name + ".toml"),
                    {"PORT": port, "UPSTREAM_PORT": up_port, "STORE": store, "WORKERS": 1,
                     "SYNC": "true", "ACCESS": "off"})
    H.edit_conf(conf, '[admin]\naddress = ""', '[admin]\naddress = "127.0.0.1:%d"' % admin)
    if busy_poll:
        H.set_busy_poll(conf, busy_poll)
    out = os.path.join(tmp, name + ".out")
    p = procs.start([args.bin, "--config", conf], out)
    B.wait_line(out, "listening on", p)
    B.wait_port(admin, p)
    return port, admin, p, store


def start_synced_origins(procs, tmp):
    """synced_origin.c making no synced writes per request, two appended and two written over
    zeros, each behind an nginx proxy of its own: {variant: proxy port}."""
    ports = {}
    for name, syncs, mode in (("none", 0, "append"), ("append", 2, "append"),
                              ("overwrite", 2, "overwrite")):
        data = os.path.join(tmp, "synced-%s.data" % name)
        px = H.start_c_origin(procs, tmp, "synced_origin.c", [syncs, mode, data],
                              "proxy-synced-" + name)[0]
        ports[name] = px.ports[0]
    return ports


def wrk_ms(port, mode, prefix, args, nkeys=REPLAY_KEYS):
    """One wrk run at one connection, every answer a 2xx: (ms per request, requests)."""
    r = B.run_wrk(port, mode, prefix, args.duration, 1, 1, nkeys)
    errors = sum(r[k] for k in ("status_errors", "connect", "read", "write", "timeout"))
    H.check(errors == 0 and r["requests"] > 0, "%s on port %d: %s" % (mode, port, r))
    return 1e3 / r["rps"], r["requests"]


def timed_wrk(pids, port, args):
    """The replay request at one connection: (ms per request, user us, kernel us per request of
    pids). utime and stime are sampled at the scheduler's tick: roughly +-10% over a run."""
    u0, s0 = B.user_sys_seconds(pids)
    ms, n = wrk_ms(port, "replay", "r", args)
    u1, s1 = B.user_sys_seconds(pids)
    return ms, (u1 - u0) / n * 1e6, (s1 - s0) / n * 1e6


def replay_round(args, env):
    """The replay request (Authorization, Idempotency-Key) through nginx, through the gateway
    and straight to the origin: ms per request, and the user and kernel CPU per request of the
    gateway and of the origin."""
    r = {"nginx_replay": wrk_ms(env.nginx_port, "replay", "r", args)[0]}
    r["replay"], r["replay_user"], r["replay_sys"] = timed_wrk([env.pid], env.port, args)
    r["origin"], r["origin_user"], r["origin_sys"] = timed_wrk(B.children(env.origin_pid),
                                                               env.up_port, args)
    return r


def one_round(args, env, idx):
    """env: what main started (the ports of nginx, the synced origins' proxies, the gateway, its
    admin and the origin; the gateway's and the origin's pids; the store's directory)."""
    nginx_ms = wrk_ms(env.nginx_port, "passthrough", "p", args)[0]
    synced = {name: wrk_ms(p, "passthrough", "p", args)[0]
              for name, p in env.synced_ports.items()}
    probe = B.fdatasync_probe(env.store, 200)
    before, cpu0 = scrape(env.admin), B.thread_group_run_seconds(env.pid)
    fresh_ms = wrk_ms(env.port, "fresh", "f%d" % idx, args)[0]
    after, cpu1 = scrape(env.admin), B.thread_group_run_seconds(env.pid)
    r = {"nginx": nginx_ms, "fresh": fresh_ms, "fdatasync": probe[0],
         "synced0": synced["none"], "floor_e2e": synced["append"],
         "floor_e2e_over": synced["overwrite"]}
    if args.replay:
        r.update(replay_round(args, env))
    if env.busy_port:
        r["busy_fresh"] = wrk_ms(env.busy_port, "fresh", "bf%d" % idx, args)[0]
        if args.replay:
            r["busy_replay"] = wrk_ms(env.busy_port, "replay", "r", args)[0]
    for name in SERIES:
        r[name], r[name + "_n"] = mean_ms(before, after, name)
    n = r["request_n"] or 1
    for group in ("workers", "store"):
        r["cpu_" + group] = (cpu1[group] - cpu0[group]) / n * 1e3
    return r


ROWS = [
    ("a fresh request, as the client sees it (1 / req/s)", "fresh"),
    ("  inside the gateway (complete request to answer)", "request"),
    ("    claim: store call to answer", "claim"),
    ("      its group commit's synced write (the mean of both)", "write"),
    ("    upstream call", "upstream"),
    ("    completion: store call to answer", "complete"),
    ("      its group commit's synced write (the mean of both)", "write"),
    ("    the rest in the gateway (parse, hash, lookup, answer)", "rest"),
    ("  outside the gateway (client, loopback, wake-ups)", "outside"),
    ("hand-offs: both store calls less their writes", "handoffs"),
    ("the floor: nginx's request + 2 fdatasync (probe p50), the median of the rounds' sums",
     "floor"),
    ("  a request through nginx (1 / req/s)", "nginx"),
    ("  fdatasync of a 64 B append (probe p50)", "fdatasync"),
    ("fresh / floor (each ratio below: the median of the rounds' ratios)", "ratio"),
    ("the floor end to end: nginx to an origin making 2 synced appends of 64 B", "floor_e2e"),
    ("  the same origin making none (against nginx's request above)", "synced0"),
    ("  the floor end to end / the floor", "e2e_over_sum"),
    ("fresh / the floor end to end", "ratio_e2e"),
    ("the floor end to end with the 2 writes over zeros (as the store's WAL)", "floor_e2e_over"),
    ("fresh / the floor end to end over zeros", "ratio_e2e_over"),
    ("CPU per fresh request: workers / store thread", "cpu"),
]

REPLAY_ROWS = [
    ("the replay request through nginx (1 / req/s)", "nginx_replay"),
    ("a replay through the gateway (1 / req/s)", "replay"),
    ("the replay request straight to the origin, no proxy (1 / req/s)", "origin"),
    ("replay x nginx (req/s, the median of the rounds' ratios)", "replay_x"),
    ("the origin straight x nginx (the same): the most an answer from memory gains", "origin_x"),
    ("CPU per request, user / kernel: the gateway's replay", "replay_cpu"),
    ("CPU per request, user / kernel: the origin answering straight", "origin_cpu"),
]

BUSY_ROWS = [
    ("a fresh request through a gateway with server.busy_poll (1 / req/s)", "busy_fresh"),
    ("  / the floor", "busy_ratio"),
    ("  / the floor end to end", "busy_ratio_e2e"),
]
BUSY_REPLAY_ROWS = [
    ("a replay through the gateway with server.busy_poll (1 / req/s)", "busy_replay"),
    ("  x nginx (req/s, the median of the rounds' ratios)", "busy_replay_x"),
]
RATIOS = ("ratio", "e2e_over_sum", "ratio_e2e", "ratio_e2e_over", "replay_x", "origin_x",
          "busy_ratio", "busy_ratio_e2e", "busy_replay_x")


def derive(r):
    # The write histogram is per group commit: it is the claim's and the completion's only while
    # each commit holds one of them, as at one connection (two commits per request).
    H.check(abs(r["write_n"] / max(1, r["request_n"]) - 2) < 0.05,
            "%d group commits for %d fresh requests" % (r["write_n"], r["request_n"]))
    r["rest"] = r["request"] - r["claim"] - r["upstream"] - r["complete"]
    r["outside"] = r["fresh"] - r["request"]
    r["handoffs"] = r["claim"] + r["complete"] - 2 * r["write"]
    r["floor"] = r["nginx"] + 2 * r["fdatasync"]
    r["ratio"] = r["fresh"] / r["floor"]
    r["e2e_over_sum"] = r["floor_e2e"] / r["floor"]
    r["ratio_e2e"] = r["fresh"] / r["floor_e2e"]
    r["ratio_e2e_over"] = r["fresh"] / r["floor_e2e_over"]
    if "replay" in r:
        r["replay_x"] = r["nginx_replay"] / r["replay"]
        r["origin_x"] = r["nginx_replay"] / r["origin"]
    if "busy_fresh" in r:
        r["busy_ratio"] = r["busy_fresh"] / r["floor"]
        r["busy_ratio_e2e"] = r["busy_fresh"] / r["floor_e2e"]
    if "busy_replay" in r:
        r["busy_replay_x"] = r["nginx_replay"] / r["busy_replay"]
    return r


def report(results):
    med = {k: statistics.median(r[k] for r in results) for k in results[0]}
    print("| per request, median of %d rounds | ms |" % len(results))
    print("|---|---:|")
    rows = ROWS + (REPLAY_ROWS if "replay" in med else [])
    rows += (BUSY_ROWS if "busy_fresh" in med else []) + (
        BUSY_REPLAY_ROWS if "busy_replay" in med else [])
    for label, key in rows:
        if key == "cpu":
            value = "%.0f / %.0f us" % (med["cpu_workers"] * 1e3, med["cpu_store"] * 1e3)
        elif key in ("replay_cpu", "origin_cpu"):
            who = key[:-4]
            value = "%.1f / %.1f us" % (med[who + "_user"], med[who + "_sys"])
        elif key in RATIOS:
            value = "%.2fx" % med[key]
        else:
            value = "%.3f" % med[key]
        print("| %s | %s |" % (label, value))


def main(argv):
    ap = argparse.ArgumentParser(prog="fresh_breakdown.py")
    ap.add_argument("--bin", default="build/idemgate")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--replay", action="store_true",
                    help="also replays, and requests straight to the origin (their limit)")
    ap.add_argument("--busy-poll", default="", metavar="DURATION",
                    help="also a second gateway with server.busy_poll = DURATION (e.g. 400us): "
                         "its fresh requests (and replays with --replay) in the same rounds")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="idemgate-freshbd-")
    procs = B.Procs()
    hole = B.black_hole()
    try:
        up_port, px, origin = H.start_origin_and_proxy(procs, tmp, hole)
        synced_ports = start_synced_origins(procs, tmp)
        port, admin, p, store = start_gateway(procs, args, tmp, up_port)
        busy_port = 0
        if args.busy_poll:
            busy_port = start_gateway(procs, args, tmp, up_port, "idemgate-busypoll",
                                      args.busy_poll)[0]
        env = types.SimpleNamespace(busy_port=busy_port, nginx_port=px.ports[0],
                                    synced_ports=synced_ports, port=port, admin=admin, pid=p.pid,
                                    store=store, up_port=up_port, origin_pid=origin.pid)
        for gw in [port] + ([busy_port] if busy_port else []):
            B.run_wrk(gw, "fresh", "warm", 2, 1, 1)
            if args.replay:
                counts = B.preload_replay(gw, REPLAY_KEYS)
                H.check(counts == {201: REPLAY_KEYS}, "replay preload: %s" % counts)
        results = [derive(one_round(args, env, i)) for i in range(args.rounds)]
        print("load %s; %d rounds of %d s, wrk -t1 -c1" % (B.loadavg(), args.rounds,
                                                          args.duration))
        report(results)
    finally:
        procs.stop_all()


if __name__ == "__main__":
    main(sys.argv[1:])
