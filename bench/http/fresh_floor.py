# SPDX-License-Identifier: Apache-2.0
# A fresh request at many connections (wrk -t2 -c64) against its floor, in the same alternating
# rounds: nginx proxying to its origin (the baseline), nginx proxying to an origin that makes two
# synced writes per request committed in groups (grouped_origin.c: one fdatasync per pass of its
# loop, covering every write made since the last), the same origin making none (its control: it
# must run no faster than nginx's origin), the gateway (workers = 1, store.sync = true) and the
# gateway with store.sync = false (the limit without the disk). Every proxy writes an access log
# to a file, as in the target's shape (scripts/bench http --access-log on). Per run: req/s,
# latency, CPU per request of the proxy and of its origin, the share of the machine's CPU time
# left idle (/proc/stat: idle + iowait), and the gateways' CPU by thread (schedstat).
# The floor is what a proxy whose request waits for two synced writes in a row reaches on this
# host when its own work costs what nginx's does, its writes small and its group commit ideal:
# what the disk leaves of nginx's rate.
# Usage: python3 bench/http/fresh_floor.py --bin build/idemgate [--rounds 5] [--duration 5]
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import types

import benchlib as B
import http_bench as H

FLOORS = (("nginx-floor0", 0), ("nginx-floor2", 2))


def start_floors(procs, tmp):
    """grouped_origin.c making 0 and 2 synced writes per request, each behind an nginx proxy of
    its own that logs as the baseline does: [(Target, origin pids function)]."""
    out = []
    for name, syncs in FLOORS:
        data = os.path.join(tmp, name + ".data")
        px, origin = H.start_c_origin(procs, tmp, "grouped_origin.c", [syncs, data], name, True)
        out.append((px, lambda p=origin: [p.pid]))
    return out


def start_all(procs, args, tmp, hole):
    up_port, nginx, up = H.start_origin_and_proxy(procs, tmp, hole, "nginx", logged=True)
    origin = lambda: [up.pid] + B.children(up.pid)
    targets = [(nginx, origin)] + start_floors(procs, tmp)
    gw, store = H.start_idemgate(procs, args, tmp, "idemgate", up_port, 1, logged=True)
    nosync = H.start_idemgate(procs, args, tmp, "idemgate-nosync", up_port, 1, logged=True,
                              sync="false")[0]
    targets += [(gw, origin), (nosync, origin)]
    for t, _ in targets:
        st, _, body = B.post(t.port, "/v1/payments", {"Content-Type": "application/json"})
        H.check(st == 201 and len(body) == len(B.BODY), "%s: %d %r" % (t.name, st, body[:80]))
    return targets, store


def cpu_times():
    """(idle + iowait, all) jiffies of the machine, from /proc/stat's first line."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return fields[3] + fields[4], sum(fields)


def measured_run(args, tmp, t, origin, prefix):
    """H.run_one, plus the share of the machine's CPU time left idle during it, and for a gateway
    its CPU per request by thread from the scheduler's clock."""
    gateway = not t.name.startswith("nginx")
    i0, a0 = cpu_times()
    g0 = B.thread_group_run_seconds(t.proc.pid) if gateway else {}
    r = H.run_one(args, tmp, t, "fresh", prefix, origin)
    i1, a1 = cpu_times()
    r["idle"] = (i1 - i0) / max(a1 - a0, 1)
    if gateway:
        g1 = B.thread_group_run_seconds(t.proc.pid)
        r["run_us"] = {g: (g1[g] - g0[g]) * 1e6 / max(r["requests"], 1) for g in g0}
    errors = sum(r[k] for k in ("status_errors", "connect", "read", "write", "timeout"))
    H.check(errors == 0 and r["requests"] > 0, "%s: %s" % (t.name, r))
    return r


def run_rounds(args, tmp, targets, store):
    results, probes = {}, []
    for rnd in range(args.rounds):
        for t, origin in (targets if rnd % 2 == 0 else list(reversed(targets))):
            r = measured_run(args, tmp, t, origin, "fresh-r%d-%s" % (rnd, t.name))
            results.setdefault(t.name, []).append(r)
            os.sync()
        probes.append(B.fdatasync_probe(store, 100)[0])
        H.log("round %d done; fdatasync p50 %.2f ms" % (rnd, probes[-1]))
    return results, probes


def report(args, results, probes):
    med = lambda name, key: statistics.median(r[key] for r in results[name])
    base = results["nginx"]
    paired = lambda name: statistics.median(r["rps"] / b["rps"] for r, b in
                                            zip(results[name], base))
    print("load %s; %d rounds of %d s, wrk -t%d -c%d, the fresh request, every proxy logging; "
          "fdatasync p50 %.2f ms (median of the rounds' probes)\n"
          % (B.loadavg(), args.rounds, args.duration, args.threads, args.connections,
             statistics.median(probes)))
    print("| target | req/s | x nginx (medians) | x nginx (paired) | p50 / p99 ms "
          "| CPU us/req: target / its origin | CPU idle |")
    print("|---|---:|---:|---:|---|---|---:|")
    for name in results:
        print("| %s | %.0f | %.2fx | %.2fx | %.2f / %.2f | %.1f / %.1f | %.0f%% |" % (
            name, med(name, "rps"), med(name, "rps") / med("nginx", "rps"), paired(name),
            med(name, "p50_us") / 1e3, med(name, "p99_us") / 1e3, med(name, "cpu_us"),
            med(name, "up_cpu_us"), med(name, "idle") * 100))
    for name in ("idemgate", "idemgate-nosync"):
        split = ", ".join("%s %.1f" % (g, statistics.median(r["run_us"][g]
                                                             for r in results[name]))
                          for g in results[name][0]["run_us"])
        print("\n%s CPU us per request by thread (schedstat): %s" % (name, split))
    pair = lambda a, b: statistics.median(x["rps"] / y["rps"] for x, y in
                                          zip(results[a], results[b]))
    print("\nWhat the two synced writes cost (req/s with them / without, paired): the floor %.2f "
          "(nginx-floor2 / nginx-floor0), the gateway %.2f (idemgate / idemgate-nosync)."
          % (pair("nginx-floor2", "nginx-floor0"), pair("idemgate", "idemgate-nosync")))
    print("The floor x nginx (paired): %.2fx; fresh through the gateway / the floor: %.2f; the "
          "gateway without the disk x nginx: %.2fx." % (paired("nginx-floor2"),
                                                        pair("idemgate", "nginx-floor2"),
                                                        paired("idemgate-nosync")))


def main(argv):
    ap = argparse.ArgumentParser(prog="fresh_floor.py")
    ap.add_argument("--bin", default="build/idemgate")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--connections", type=int, default=64)
    args = ap.parse_args(argv)
    args = types.SimpleNamespace(**vars(args), sync="true", replay_keys=1000)
    tmp = tempfile.mkdtemp(prefix="idemgate-floor-")
    procs = B.Procs()
    hole = B.black_hole()
    try:
        targets, store = start_all(procs, args, tmp, hole)
        results, probes = run_rounds(args, tmp, targets, store)
        report(args, results, probes)
        with open(os.path.join(tmp, "idemgate.out"), errors="replace") as f:
            over = "is on ext4 or XFS" in f.read()
        print("The gateway's WAL %s (its store's filesystem), as the floor's writes are." % (
            "is written over zeros" if over else "is appended, NOT written over zeros"))
    finally:
        procs.stop_all()
        hole.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
