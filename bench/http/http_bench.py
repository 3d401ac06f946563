# SPDX-License-Identifier: Apache-2.0
# scripts/bench http: nginx baseline vs idemgate on loopback with wrk; prints a Markdown report.
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import bench_report
import benchlib as B
import pgcluster

SCENARIOS = ["passthrough", "fresh", "replay", "conflict"]  # wrk scenarios
STREAM = "stream"  # not wrk: 64 MiB passthrough GETs, one at a time (stream_rounds)
STREAM_BYTES = 64 << 20
STREAM_GETS = 3  # per target per round
LOG_SUFFIX = bench_report.LOG_SUFFIX
MIB = 1024.0


def log(msg):
    print("[bench http %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="scripts/bench http")
    p.add_argument("--duration", type=int, default=10, help="seconds per wrk run (default 10)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument("--threads", type=int, default=2, help="wrk threads (default 2)")
    p.add_argument("--connections", type=int, default=64, help="wrk connections (default 64)")
    p.add_argument("--scenarios", default=",".join(SCENARIOS + [STREAM]),
                   help="comma-separated subset")
    p.add_argument("--workers2", type=int, default=1, help="1: also measure workers=2 (default)")
    p.add_argument("--replay-keys", type=int, default=1000, help="keys pre-created for replay")
    p.add_argument("--fill", type=int, default=1000000,
                   help="records to store before reading RSS (0 = skip; default 1000000)")
    p.add_argument("--fill-max-seconds", type=int, default=900, help="bound on the fill phase")
    p.add_argument("--perf", metavar="DIR", default="",
                   help="after the rounds, perf-record idemgate (workers=1) under passthrough, "
                        "fresh and replay (those in --scenarios) for --duration s each; data "
                        "and reports go to DIR")
    p.add_argument("--perf-targets", default="idemgate",
                   help="with --perf: the targets profiled, comma-separated (default idemgate; "
                        "e.g. idemgate-secret,idemgate-sealed, or nginx: its worker); each target's reports get its "
                        "name as a suffix unless it is idemgate")
    p.add_argument("--sync", choices=["true", "false"], default="true",
                   help="store.sync (default true; false only to see what the disk costs)")
    p.add_argument("--access-log", choices=["off", "on", "both"], default="off",
                   help="on: nginx (default combined format, one write per request) and idemgate "
                        "(JSON lines) log every request to a file in the temp dir; both: every "
                        "target twice, logs off and on (suffix +log), in the same rounds, and "
                        "what turning the log on costs each (default off)")
    p.add_argument("--busy-poll", default="", metavar="DURATION",
                   help="also idemgate-busypoll (workers=1, server.busy_poll = DURATION, e.g. "
                        "400us) in the same rounds")
    p.add_argument("--nosync-target", action="store_true",
                   help="also idemgate-nosync (workers=1, store.sync = false) in the same rounds: "
                        "the limit without the disk, to show the gap to it")
    p.add_argument("--encryption-target", action="store_true",
                   help="also idemgate-secret (workers=1, a scope.secret_file) and "
                        "idemgate-sealed (the same plus [store.encryption], docs/encryption.md) "
                        "in the same rounds: what sealing costs, the secret alike on both")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (configs, logs)")
    p.add_argument("--bin", required=True, help="idemgate binary")
    p.add_argument("--compare-bin", default="",
                   help="a second idemgate binary (e.g. an older commit) measured as target "
                        "idemgate-cmp (workers=1) in the same rounds, alternating with --bin")
    p.add_argument("--backend", choices=["rocksdb", "postgres"], default="rocksdb",
                   help="postgres: also start a PostgreSQL server (fsync on) and measure one "
                        "(idemgate-pg) and two (idemgate-pg2, wrk split over both) instances "
                        "on it, next to the RocksDB rows of the same run")
    p.add_argument("--pg-connections", type=int, default=8,
                   help="store.postgres.connections per instance (default 8)")
    return p.parse_args(argv)


class Target:
    """One benchmarked endpoint: nginx, or one or more idemgate instances sharing a store."""

    def __init__(self, name, ports, procs, pids_fn, db_pids=lambda: []):
        self.name, self.ports, self.procs, self.pids = name, ports, procs, pids_fn
        self.port, self.proc, self.db_pids = ports[0], procs[0], db_pids
        # The nginx this target is compared with: the one logging as it does.
        self.base = "nginx" + LOG_SUFFIX if name.endswith(LOG_SUFFIX) else "nginx"



def start_nginx(procs, tmp, template, name, values):
    conf = B.render(template, os.path.join(tmp, name + ".conf"), values)
    return procs.start(["nginx", "-e", os.path.join(tmp, name + ".error.log"), "-p", tmp,
                        "-c", conf], os.path.join(tmp, name + ".out"))


def access_log_path(tmp, name, logged):
    return os.path.join(tmp, name + ".access.log") if logged else "off"


def start_nginx_proxy(procs, tmp, values, name, logged):
    """nginx as a reverse proxy on a port of its own; access_log to a file when `logged`."""
    port = B.free_ports(1)[0]
    vals = dict(values, PROXY_PORT=port, PID=os.path.join(tmp, name + ".pid"),
                ACCESS_LOG=access_log_path(tmp, name, logged))
    p = start_nginx(procs, tmp, "nginx_proxy.conf", name, vals)
    B.wait_port(port, p)
    return Target(name, [port], [p], lambda: [p.pid] + B.children(p.pid))


def nginx_values(tmp):
    """What every nginx template here needs: the user line (as root) and the temp dir."""
    return {"USER": "user root;" if os.geteuid() == 0 else "", "DIR": tmp}


def start_origin_and_proxy(procs, tmp, hole, name="proxy", logged=False):
    """The nginx origin (its /slow/ to `hole`) and nginx proxying it, logging when `logged`:
    (origin port, proxy Target, the origin's master process)."""
    up_port = B.free_ports(1)[0]
    vals = dict(nginx_values(tmp), UPSTREAM_PORT=up_port, HOLE_PORT=hole.getsockname()[1],
                BODY=B.BODY)
    up = start_nginx(procs, tmp, "nginx_upstream.conf", "upstream", vals)
    B.wait_port(up_port, up)
    return up_port, start_nginx_proxy(procs, tmp, vals, name, logged), up


def start_c_origin(procs, tmp, source, args, name, logged=False):
    """bench/http/SOURCE, a C origin answering the benchmark's body (compiled with cc into `tmp`
    on first use), run as `exe PORT ARGS... BODY_FILE`, behind an nginx proxy of its own named
    `name`, logging when `logged`: (proxy Target, the origin's process)."""
    exe = os.path.join(tmp, os.path.splitext(source)[0])
    body = os.path.join(tmp, "origin.body")
    if not os.path.exists(exe):
        subprocess.run(["cc", "-O2", "-pthread", "-o", exe, os.path.join(B.HERE, source)],
                       check=True)
    if not os.path.exists(body):
        with open(body, "w") as f:
            f.write(B.BODY)
    port = B.free_ports(1)[0]
    out = os.path.join(tmp, name + "-origin.out")
    origin = procs.start([exe, str(port)] + [str(a) for a in args] + [body], out)
    B.wait_line(out, "listening on", origin)
    return start_nginx_proxy(procs, tmp, dict(nginx_values(tmp), UPSTREAM_PORT=port), name,
                             logged), origin


def private_file(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def encryption_toml(tmp, sealed):
    """[scope] with a secret file and, when `sealed`, [store.encryption] with one active key."""
    text = '\n[scope]\nsecret_file = "%s"\n' % private_file(os.path.join(tmp, "scope.secret"),
                                                           "bench-scope-secret-" + "s" * 24)
    if sealed:
        key = private_file(os.path.join(tmp, "bench.key"), os.urandom(32).hex() + "\n")
        text += '\n[store.encryption]\nactive = "bench"\nkeys = { "bench" = "%s" }\n' % key
    return text


def edit_conf(conf, old, new):
    """Replaces `old` (which must be there) with `new` once in a rendered config file."""
    with open(conf) as f:
        text = f.read()
    check(old in text, "%s: the template changed (no %r)" % (conf, old))
    with open(conf, "w") as f:
        f.write(text.replace(old, new, 1))


def set_busy_poll(conf, duration):
    """Adds server.busy_poll to a config rendered from idemgate.toml (its [server] table)."""
    edit_conf(conf, "\n[server]\n", '\n[server]\nbusy_poll = "%s"\n' % duration)


def start_idemgate(procs, args, tmp, name, upstream_port, workers, binary="", pg=None,
                   logged=False, sync=None, extra="", busy_poll=""):
    port = B.free_ports(1)[0]
    store = os.path.join(tmp, "store-" + name)
    vals = {"PORT": port, "UPSTREAM_PORT": upstream_port, "STORE": store, "WORKERS": workers,
            "SYNC": sync or args.sync, "ACCESS": access_log_path(tmp, name, logged)}
    if pg:
        vals.update({"DSN": pg.dsn(), "PG_CONNECTIONS": args.pg_connections})
    conf = B.render("idemgate_pg.toml" if pg else "idemgate.toml",
                    os.path.join(tmp, name + ".toml"), vals)
    if busy_poll:
        set_busy_poll(conf, busy_poll)
    if extra:
        with open(conf, "a") as f:
            f.write(extra)
    out = os.path.join(tmp, name + ".out")
    p = procs.start([binary or args.bin, "--config", conf], out)
    B.wait_line(out, "listening on", p)
    db = pg.pids if pg else (lambda: [])
    return Target(name, [port], [p], lambda: [p.pid], db), store


def start_pg_targets(procs, args, tmp, upstream_port, pg):
    """idemgate-pg (one instance) and idemgate-pg2 (two instances), all on the same database."""
    one = start_idemgate(procs, args, tmp, "idemgate-pg", upstream_port, 1, pg=pg)[0]
    a = start_idemgate(procs, args, tmp, "idemgate-pg2a", upstream_port, 1, pg=pg)[0]
    b = start_idemgate(procs, args, tmp, "idemgate-pg2b", upstream_port, 1, pg=pg)[0]
    two = Target("idemgate-pg2", a.ports + b.ports, a.procs + b.procs,
                 lambda: [a.proc.pid, b.proc.pid], pg.pids)
    return [one, two]


def wrk_spread(args, tmp, target, scenario, prefix):
    """One wrk per instance in parallel, threads and connections split evenly; merged result.
    req/s are summed; p50/p99 are the higher of the processes' values."""
    n = len(target.ports)
    res = [None] * n

    def one(i):
        res[i] = B.run_wrk(target.ports[i], scenario, "%s-i%d" % (prefix, i), args.duration,
                           max(1, args.threads // n), max(1, args.connections // n),
                           args.replay_keys, log=os.path.join(tmp, "wrk.log"))

    ths = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    if any(r is None for r in res):
        raise RuntimeError("a wrk process failed for %s" % target.name)
    out = {k: sum(r[k] for r in res) for k in ("requests", "status_errors", "connect", "read",
                                                "write", "timeout", "rps")}
    out.update({k: max(r[k] for r in res) for k in ("duration_us", "p50_us", "p99_us")})
    out["mean_us"] = sum(r["mean_us"] * r["requests"] for r in res) / max(out["requests"], 1)
    return out


def check(cond, msg):
    if not cond:
        raise RuntimeError(msg)


def run_one(args, tmp, target, scenario, prefix, upstream_pids):
    pids = target.pids()
    c0, u0 = B.cpu_seconds(pids), B.cpu_seconds(upstream_pids())
    s0 = B.context_switches(pids)
    d0 = B.cpu_seconds(target.db_pids())
    gateway = not target.name.startswith("nginx") and len(target.procs) == 1
    g0 = B.thread_group_cpu_seconds(target.proc.pid) if gateway else {}
    if len(target.ports) > 1:
        r = wrk_spread(args, tmp, target, scenario, prefix)
    else:
        r = B.run_wrk(target.port, scenario, prefix, args.duration, args.threads,
                      args.connections, args.replay_keys, log=os.path.join(tmp, "wrk.log"))
    n = max(r["requests"], 1)
    r["cpu_us"] = (B.cpu_seconds(pids) - c0) * 1e6 / n
    r["cs_per_req"] = (B.context_switches(pids) - s0) / n
    r["up_cpu_us"] = (B.cpu_seconds(upstream_pids()) - u0) * 1e6 / n
    r["db_cpu_us"] = (B.cpu_seconds(target.db_pids()) - d0) * 1e6 / n
    if gateway:
        g1 = B.thread_group_cpu_seconds(target.proc.pid)
        r["threads_us"] = {g: (g1[g] - g0[g]) * 1e6 / n for g in g0}
    r["load"] = B.loadavg()
    log("%-11s %-12s %9.0f req/s  p50 %6.2f ms  p99 %6.2f ms  non2xx %d  timeouts %d  "
        "cpu %.1f us/req  cs %.2f/req  load %s" % (scenario, target.name, r["rps"], r["p50_us"] / 1e3,
                                      r["p99_us"] / 1e3, r["status_errors"], r["timeout"],
                                      r["cpu_us"], r["cs_per_req"], r["load"]))
    return r


def rounds(args, tmp, targets, upstream_pids, results, fsync_samples, store_dir):
    scenarios = [s for s in args.scenarios.split(",") if s in SCENARIOS]
    for rnd in range(args.rounds):
        for sc in scenarios:
            order = targets if rnd % 2 == 0 else list(reversed(targets))
            for t in order:
                prefix = "%s-r%d-%s" % (sc, rnd, t.name)
                results.setdefault((sc, t.name), []).append(
                    run_one(args, tmp, t, sc, prefix, upstream_pids))
                # What this run left dirty (a store with sync = false, the access logs) is written
                # now, not during the next target's run, whose syncs would wait behind it.
                os.sync()
                if sc == "conflict" and t.name != "nginx":
                    st, _, body = B.post(t.port, "/slow/payments",
                                         {"Content-Type": "application/json",
                                          "Authorization": "Bearer sk_bench",
                                          "Idempotency-Key": prefix + "-3"}, B.REQ_BODY)
                    log("conflict check on %s: %d %s" % (t.name, st, body[:60]))
        fsync_samples.append(B.fdatasync_probe(store_dir, 100))
        log("round %d done; fdatasync p50 %.2f p99 %.2f ms" % (rnd, *fsync_samples[-1][:2]))


def stream_once(port):
    """One 64 MiB passthrough GET read by curl into /dev/null: MiB/s, or None when it failed."""
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w",
                        "%{http_code} %{size_download} %{time_total}",
                        "http://127.0.0.1:%d/big/64m.bin" % port],
                       capture_output=True, text=True, timeout=300)
    fields = r.stdout.split()
    if len(fields) != 3 or fields[0] != "200" or int(fields[1]) != STREAM_BYTES:
        log("stream GET on %d failed: %s" % (port, r.stdout))
        return None
    return STREAM_BYTES / (1 << 20) / float(fields[2])


def stream_rounds(args, targets, results):
    """STREAM_GETS 64 MiB GETs per target per round, targets alternating as in rounds()."""
    for rnd in range(args.rounds):
        for t in (targets if rnd % 2 == 0 else list(reversed(targets))):
            speeds = [stream_once(t.port) for _ in range(STREAM_GETS)]
            ok = [x for x in speeds if x is not None]
            rss = B.proc_status_kib(t.proc.pid, "VmHWM") if t.name != "nginx" else 0
            results.setdefault((STREAM, t.name), []).append(
                {"mibps": statistics.median(ok) if ok else 0.0, "failed": len(speeds) - len(ok),
                 "hwm": rss})
            log("stream      %-12s %8.0f MiB/s  failed %d/%d" % (
                t.name, results[(STREAM, t.name)][-1]["mibps"], len(speeds) - len(ok),
                len(speeds)))


def stream_table(args, results, names):
    out = ["\n### stream: 64 MiB passthrough GET (origin nginx static file -> target -> curl to "
           "/dev/null), %d GETs per target per round, median of round medians\n" % STREAM_GETS,
           "| target | MiB/s | vs nginx | failed GETs | VmHWM after all rounds (MiB) |",
           "|---|---:|---:|---:|---:|"]
    base = statistics.median(r["mibps"] for r in results[(STREAM, "nginx")])
    for name in names:
        if (STREAM, name) not in results:
            continue
        rs = results[(STREAM, name)]
        mibps = statistics.median(r["mibps"] for r in rs)
        out.append("| %s | %.0f | %.2fx | %d | %s |" % (
            name, mibps, mibps / base if base else 0.0, sum(r["failed"] for r in rs),
            "%.1f" % (rs[-1]["hwm"] / MIB) if name != "nginx" else "-"))
    return out


def fill(args, procs, tmp, upstream_port):
    """Stores --fill records with wrk fresh in runs of <= 20 s; CPU/req per run shows whether the
    fresh path's cost grows with the store."""
    t, store = start_idemgate(procs, args, tmp, "idemgate-fill", upstream_port, 1,
                              logged=args.access_log == "on")
    stored, runs, start = 0, 0, time.monotonic()
    rps, per_run = 0.0, []
    while stored < args.fill and time.monotonic() - start < args.fill_max_seconds:
        left = args.fill - stored
        dur = 20 if rps == 0 else int(min(20, max(5, left / rps * 1.02 + 1)))
        c0, b0 = B.cpu_seconds([t.proc.pid]), B.thread_group_cpu_seconds(t.proc.pid)["rocksdb bg"]
        r = B.run_wrk(t.port, "fresh", "fill%d" % runs, dur, args.threads, args.connections,
                      log=os.path.join(tmp, "wrk-fill.log"))
        done = r["requests"] - r["status_errors"]
        cpu = (B.cpu_seconds([t.proc.pid]) - c0) * 1e6 / max(r["requests"], 1)
        bg = (B.thread_group_cpu_seconds(t.proc.pid)["rocksdb bg"] - b0) * 1e6 / max(r["requests"], 1)
        per_run.append((stored, r["rps"], cpu, bg, B.loadavg()))
        stored += done
        rps = r["rps"]
        runs += 1
        log("fill: %d records stored (%.0f req/s, %.1f CPU us/req of which RocksDB background "
            "%.1f, RSS %.1f MiB)" % (stored, rps, cpu, bg,
                                     B.proc_status_kib(t.proc.pid, "VmRSS") / MIB))
    rss = B.proc_status_kib(t.proc.pid, "VmRSS")
    hwm = B.proc_status_kib(t.proc.pid, "VmHWM")
    du = subprocess.run(["du", "-sk", store], capture_output=True, text=True).stdout.split()[0]
    procs.stop(t.proc)
    return {"stored": stored, "rss": rss, "hwm": hwm, "du_kib": int(du),
            "seconds": time.monotonic() - start, "runs": per_run}


def profile(args, tmp, target, upstream_pids):
    os.makedirs(args.perf, exist_ok=True)
    for sc in [s for s in args.scenarios.split(",") if s in ("passthrough", "fresh", "replay")]:
        if target.name != "idemgate":
            sc_name = "%s-%s" % (sc, target.name)
        else:
            sc_name = sc
        data = os.path.join(args.perf, "perf-%s.data" % sc_name)
        perf = B.perf_record(target.pids(), data, args.duration)
        time.sleep(0.5)
        run_one(args, tmp, target, sc, "perf-" + sc, upstream_pids)
        perf.wait()
        for mode in ("self", "children"):
            B.perf_report(data, os.path.join(args.perf, "report-%s-%s.txt" % (sc_name, mode)),
                          children=mode == "children")
        log("perf data for %s in %s" % (sc_name, data))


def main(argv):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = tempfile.mkdtemp(prefix="idemgate-bench-")
    procs = B.Procs()
    hole = B.black_hole()
    pg = None
    load0 = B.loadavg()
    log("temp dir %s; load %s" % (tmp, load0))
    try:
        up_port = B.free_ports(1)[0]
        vals = dict(nginx_values(tmp), UPSTREAM_PORT=up_port, HOLE_PORT=hole.getsockname()[1],
                    BODY=B.BODY)
        os.makedirs(os.path.join(tmp, "origin", "big"))
        with open(os.path.join(tmp, "origin", "big", "64m.bin"), "wb") as f:
            f.write(os.urandom(1 << 20) * (STREAM_BYTES >> 20))
        up = start_nginx(procs, tmp, "nginx_upstream.conf", "upstream", vals)
        B.wait_port(up_port, up)
        upstream_pids = lambda: [up.pid] + B.children(up.pid)
        modes = {"off": [False], "on": [True], "both": [False, True]}[args.access_log]
        targets, g1, store1 = [], None, None
        for logged in modes:
            sfx = LOG_SUFFIX if logged and args.access_log == "both" else ""
            px = start_nginx_proxy(procs, tmp, vals, "proxy" + sfx.replace("+", "-"), logged)
            targets.append(Target("nginx" + sfx, [px.port], [px.proc], px.pids))
            g, st = start_idemgate(procs, args, tmp, "idemgate" + sfx, up_port, 1, logged=logged)
            targets.append(g)
            if g1 is None:
                g1, store1 = g, st
            if args.compare_bin:
                targets.append(start_idemgate(procs, args, tmp, "idemgate-cmp" + sfx, up_port, 1,
                                              binary=args.compare_bin, logged=logged)[0])
            if args.workers2:
                targets.append(start_idemgate(procs, args, tmp, "idemgate-w2" + sfx, up_port, 2,
                                              logged=logged)[0])
            if args.encryption_target:
                for sealed in (False, True):
                    targets.append(start_idemgate(
                        procs, args, tmp, ("idemgate-sealed" if sealed else "idemgate-secret") + sfx,
                        up_port, 1, logged=logged, extra=encryption_toml(tmp, sealed))[0])
            if args.busy_poll:
                targets.append(start_idemgate(procs, args, tmp, "idemgate-busypoll" + sfx,
                                              up_port, 1, logged=logged,
                                              busy_poll=args.busy_poll)[0])
            if args.nosync_target:
                targets.append(start_idemgate(procs, args, tmp, "idemgate-nosync" + sfx, up_port,
                                              1, logged=logged, sync="false")[0])
        if args.access_log == "both":  # nginx rows first, then each mode's gateways
            targets.sort(key=lambda t: not t.name.startswith("nginx"))
        if args.backend == "postgres":
            pg = pgcluster.PgServer(B.free_ports(1)[0]).start()
            log("PostgreSQL %s on port %d (%s)" % (pg.bin, pg.port, pg.root))
            targets.extend(start_pg_targets(procs, args, tmp, up_port, pg))
        for t in targets:
            st, _, body = B.post(t.port, "/v1/payments", {"Content-Type": "application/json"})
            check(st == 201 and len(body) == len(B.BODY), "%s: %d %r" % (t.name, st, body[:80]))
            if not t.name.startswith("nginx"):
                counts = B.preload_replay(t.port, args.replay_keys)
                check(counts == {201: args.replay_keys}, "%s preload: %s" % (t.name, counts))
                for port in t.ports:
                    st, hdrs, _ = B.post(port, "/v1/payments",
                                         {"Content-Type": "application/json",
                                          "Authorization": "Bearer sk_bench",
                                          "Idempotency-Key": "replay-7"}, B.REQ_BODY)
                    check(st == 201 and hdrs.get("Idempotent-Replayed") == "true",
                          "%s replay check on %d: %d %s" % (t.name, port, st, hdrs))
        log("origin 201 with %d-byte body; %d replay keys completed" % (len(B.BODY),
                                                                       args.replay_keys))
        fsync = [("before the rounds", B.fdatasync_probe(store1)),
                 ("before the rounds, one CPU kept busy by a spinning process",
                  B.fdatasync_probe(store1, busy_cpu=True))]
        per_round = []
        results = {}
        rounds(args, tmp, targets, upstream_pids, results, per_round, store1)
        if per_round:
            fsync.append(("after each round (median of round medians)",
                          tuple(statistics.median(s[i] for s in per_round) for i in range(3))))
        gateways = [t for t in targets if not t.name.startswith("nginx")]
        hwm = {t.name: B.proc_status_kib(t.proc.pid, "VmHWM") for t in gateways}
        if STREAM in args.scenarios.split(","):
            stream_rounds(args, [t for t in targets if len(t.ports) == 1], results)
        if args.perf:
            wanted = args.perf_targets.split(",")
            for t in [g1] + [t for t in targets if t is not g1 and t.name in wanted]:
                if t.name in wanted:
                    profile(args, tmp, t, upstream_pids)
        for t in gateways:
            for p in t.procs:
                procs.stop(p)
        filled = fill(args, procs, tmp, up_port) if args.fill > 0 else None
        load1 = B.loadavg()
        cmd = os.environ.get("BENCH_CMD", "scripts/bench http " + " ".join(argv))
        print(bench_report.report(args, results, [(t.name, t.base) for t in targets], fsync, hwm,
                                  filled, load0, load1, cmd))
        if (STREAM, "nginx") in results:
            print("\n".join(stream_table(args, results, [t.name for t in targets])))
        return 0
    finally:
        procs.stop_all()
        if pg:
            pg.stop()
        hole.close()
        if args.keep:
            log("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
