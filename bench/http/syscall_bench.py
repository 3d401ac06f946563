# SPDX-License-Identifier: Apache-2.0
# Syscalls and context switches per request, nginx vs idemgate, counts the machine's load does not
# move: per scenario a fixed number of requests (over C keep-alive connections) goes through each
# proxy while `perf stat -e 'syscalls:sys_enter_*' --per-thread` is attached to the proxy's
# process (nginx: its worker; idemgate: every thread, workers=1); the counts are divided by the
# requests sent. Context switches come from /proc/PID/task/*/status before and after.
# Usage: python3 bench/http/syscall_bench.py --bin build/idemgate [--requests 20000]
#   [--connections 64] [--scenarios passthrough,replay,fresh] [--json OUT]
import argparse
import asyncio
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import benchlib as B
import http_bench as H


def request_bytes(scenario, key):
    h = ["POST /v1/payments HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
         "Content-Length: %d" % len(B.REQ_BODY)]
    if scenario != "passthrough":
        h.append("Authorization: Bearer sk_bench")
        h.append("Idempotency-Key: " + key)
    return ("\r\n".join(h) + "\r\n\r\n" + B.REQ_BODY).encode()


async def one_conn(port, scenario, prefix, n, codes):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    for i in range(n):
        key = "replay-%d" % (i % 100) if scenario == "replay" else "%s-%d" % (prefix, i)
        w.write(request_bytes(scenario, key))
        head = await r.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await r.readexactly(length)
        codes[status] += 1
    w.close()


def send(port, scenario, prefix, total, conns):
    codes = collections.Counter()

    async def run():
        per = total // conns
        await asyncio.gather(*[one_conn(port, scenario, "%s-c%d" % (prefix, c), per, codes)
                               for c in range(conns)])
    asyncio.run(run())
    return codes


def thread_group(comm):
    for g, p in B.THREAD_GROUPS:
        if comm.startswith(p):
            return g
    return "nginx" if comm.startswith("nginx") else "other"


def perf_stat(pids, out):
    return subprocess.Popen(["perf", "stat", "-x", ";", "--per-thread", "-o", out,
                             "-e", "syscalls:sys_enter_*", "-p", ",".join(map(str, pids))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def parse_perf(path):
    """{(thread group, syscall): count} from perf stat -x ';' --per-thread output."""
    out = collections.Counter()
    for line in open(path):
        f = line.strip().split(";")
        if len(f) < 4 or not f[1].strip().isdigit():
            continue
        comm = f[0].rsplit("-", 1)[0]
        out[(thread_group(comm), f[3].replace("syscalls:sys_enter_", ""))] += int(f[1])
    return out


def measure(tmp, name, port, pids, scenario, args, idx):
    send(port, scenario, "warm-%s-%d" % (name, idx), min(2000, args.requests), args.connections)
    out = os.path.join(tmp, "perf-%s-%s-%d.txt" % (name, scenario, idx))
    cs0 = B.context_switches(pids)
    p = perf_stat(pids, out)
    time.sleep(1.0)  # perf attaches
    codes = send(port, scenario, "m-%s-%d" % (name, idx), args.requests, args.connections)
    n = sum(codes.values())
    p.send_signal(signal.SIGINT)
    p.wait(30)
    cs = B.context_switches(pids) - cs0
    H.check(set(codes) == {201}, "%s %s: %s" % (name, scenario, dict(codes)))
    counts = parse_perf(out)
    return {"requests": n, "ctx_switches": cs / n,
            "syscalls": {"%s/%s" % k: v / n for k, v in sorted(counts.items()) if v / n >= 0.005}}


def table(results, scenario):
    rows = collections.OrderedDict()
    names = list(results)
    for name in names:
        for k in results[name][scenario]["syscalls"]:
            rows.setdefault(k.split("/", 1)[1], None)
    out = ["| %s: syscall per request | %s |" % (scenario, " | ".join(names)),
           "|---|" + "---:|" * len(names)]
    total = collections.Counter()
    for sc in rows:
        cells = []
        for name in names:
            v = sum(c for k, c in results[name][scenario]["syscalls"].items()
                    if k.split("/", 1)[1] == sc)
            total[name] += v
            cells.append("%.2f" % v if v else "-")
        out.append("| %s | %s |" % (sc, " | ".join(cells)))
    out.append("| **total** | %s |" % " | ".join("**%.2f**" % total[n] for n in names))
    out.append("| context switches | %s |" % " | ".join(
        "%.2f" % results[n][scenario]["ctx_switches"] for n in names))
    return "\n".join(out)


def main(argv):
    ap = argparse.ArgumentParser(prog="syscall_bench.py")
    ap.add_argument("--bin", default="build/idemgate")
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--scenarios", default="passthrough,replay,fresh")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    args.sync = "true"
    tmp = tempfile.mkdtemp(prefix="idemgate-sysbench-")
    procs = B.Procs()
    hole = B.black_hole()
    try:
        up_port, px, _ = H.start_origin_and_proxy(procs, tmp, hole)
        time.sleep(0.5)
        g, _ = H.start_idemgate(procs, args, tmp, "idemgate", up_port, 1)
        send(g.ports[0], "replay", "", 100, 1)  # completes replay-0..99
        targets = {"nginx": (px.ports[0], B.children(px.procs[0].pid)),
                   "idemgate": (g.ports[0], [g.procs[0].pid])}
        results = {n: {} for n in targets}
        for i, sc in enumerate(args.scenarios.split(",")):
            for name, (port, pids) in targets.items():
                results[name][sc] = measure(tmp, name, port, pids, sc, args, i)
        print("load %s; %d requests over %d connections" % (B.loadavg(), args.requests,
                                                             args.connections))
        for sc in args.scenarios.split(","):
            print("\n" + table(results, sc))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        procs.stop_all()


if __name__ == "__main__":
    main(sys.argv[1:])
