#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The fence's cost per fresh request (docs/fencing.md), fence on vs off in the same run.

One PostgreSQL (fsync on), two idemgate instances on it, each in front of its own demo payment
API writing intents into that database: one calls idemgate_fence in the intent's transaction,
the other does not. Rounds alternate (off, on, off, on, ...) so both see the same machine load;
each round sends fresh keys from N client threads over keep-alive connections for S seconds.

  python3 bench/http/fence_bench.py --bin build/idemgate --demo build/demo-payment-api
"""
import argparse
import http.client
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_ports, wait_port  # noqa: E402
from pgcluster import PgServer  # noqa: E402

BODY = '{"amount":"100000"}'


def gateway_config(path, port, upstream_port, dsn):
    with open(path, "w") as f:
        f.write(f'[listen]\naddress = "127.0.0.1:{port}"\n[upstream]\n'
                f'url = "http://127.0.0.1:{upstream_port}"\n[store]\nbackend = "postgres"\n'
                f'path = "{path}.d"\n[store.postgres]\ndsn = "{dsn}"\nconnections = 4\n'
                '[admin]\naddress = ""\n[log]\naccess = "off"\n')


def round_(port, prefix, seconds, threads):
    lat, errors, lock = [], [0], threading.Lock()
    stop = time.monotonic() + seconds

    def work(t):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        n, mine = 0, []
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            c.request("POST", "/v1/payment_intents", body=BODY,
                      headers={"Authorization": "Bearer sk_bench",
                               "Idempotency-Key": f"{prefix}-{t}-{n}",
                               "Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            mine.append((time.perf_counter() - t0) * 1000.0)
            if r.status != 201:
                with lock:
                    errors[0] += 1
            n += 1
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    took = time.monotonic() - t0
    lat.sort()
    return len(lat) / took, statistics.mean(lat), lat[len(lat) // 2], lat[int(len(lat) * 0.99)], errors[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", required=True)
    p.add_argument("--demo", required=True)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=4)
    o = p.parse_args()
    pg_port, gw_off, gw_on, demo_off, demo_on = free_ports(5)
    pg = PgServer(pg_port).start()
    procs, work = [], tempfile.mkdtemp(prefix="fence-bench-")
    try:
        for port, fence in ((demo_off, False), (demo_on, True)):
            argv = [o.demo, "--port", str(port), "--pg-dsn", pg.dsn()] + ([] if fence else ["--no-fence"])
            procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL))
            wait_port(port, procs[-1])  # one at a time: both create demo_intents
        for port, up in ((gw_off, demo_off), (gw_on, demo_on)):
            cfg = os.path.join(work, f"gw{port}.toml")
            gateway_config(cfg, port, up, pg.dsn())
            procs.append(subprocess.Popen([o.bin, "--config", cfg], stdout=subprocess.DEVNULL,
                                          stderr=open(cfg + ".log", "w")))
        for port, proc in zip((demo_off, demo_on, gw_off, gw_on), procs):
            try:
                wait_port(port, proc)
            except RuntimeError:
                for log in sorted(f for f in os.listdir(work) if f.endswith(".log")):
                    sys.stderr.write(open(os.path.join(work, log)).read())
                raise
        round_(gw_off, "warm-off", 2, o.threads)
        round_(gw_on, "warm-on", 2, o.threads)
        res = {"off": [], "on": []}
        for i in range(o.rounds):
            for name, port in (("off", gw_off), ("on", gw_on)):
                r = round_(port, f"{name}{i}", o.seconds, o.threads)
                res[name].append(r)
                print(f"round {i} fence {name:<3}: {r[0]:7.0f} req/s  mean {r[1]:.2f} ms  "
                      f"p50 {r[2]:.2f}  p99 {r[3]:.2f}  non-201 {r[4]}", flush=True)
        off = statistics.mean(r[1] for r in res["off"])
        on = statistics.mean(r[1] for r in res["on"])
        roff = statistics.mean(r[0] for r in res["off"])
        ron = statistics.mean(r[0] for r in res["on"])
        print(f"fresh request, mean latency: fence off {off:.2f} ms, on {on:.2f} ms "
              f"(+{on - off:.2f} ms, {100 * (on - off) / off:+.1f}%); "
              f"throughput {roff:.0f} vs {ron:.0f} req/s ({100 * (ron - roff) / roff:+.1f}%); "
              f"{o.threads} client threads, load {os.getloadavg()[0]:.1f}")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait()
        pg.stop()


if __name__ == "__main__":
    main()
