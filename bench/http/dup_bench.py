# SPDX-License-Identifier: Apache-2.0
# scripts/bench http duplicates: a duplicate sent while its key's first request is still upstream
# (the origin answers after --delay-ms). Time from the duplicate's send to its final answer, for
# a client that sends `Prefer: wait` versus one that retries 409s after --retry-ms (the Stripe SDK
# style); then the gateway's memory per parked waiter (RSS growth with --park requests waiting).
import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import benchlib as B

BODY = b'{"id":"pi_bench","object":"payment_intent","amount":100}'


def parse_args(argv):
    p = argparse.ArgumentParser(prog="scripts/bench http duplicates")
    p.add_argument("--bin", required=True, help="idemgate binary")
    p.add_argument("--pairs", type=int, default=500, help="first+duplicate pairs per client kind")
    p.add_argument("--concurrency", type=int, default=32, help="pairs in flight at once")
    p.add_argument("--delay-ms", type=int, default=50, help="the origin's answer time")
    p.add_argument("--retry-ms", type=int, default=100, help="the retrying client's pause")
    p.add_argument("--park", type=int, default=10000, help="waiters parked for the memory figure")
    p.add_argument("--keep", action="store_true", help="keep the temp dir")
    return p.parse_args(argv)


class Origin:
    """HTTP/1.1 origin on loopback: every request answered 201 after `delay` (or `hold`)."""

    def __init__(self, delay):
        self.delay = delay
        self.hold = None  # an asyncio.Event: answers wait for it when set
        self.requests = 0

    async def serve(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                if length:
                    await reader.readexactly(length)
                self.requests += 1
                if self.hold is not None:
                    await self.hold.wait()
                else:
                    await asyncio.sleep(self.delay)
                writer.write(b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def request(port, key, prefer=None):
    """One POST on a new connection; returns the status."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    headers = ("POST /v1/payment_intents HTTP/1.1\r\nHost: bench\r\n"
               "Authorization: Bearer bench\r\nIdempotency-Key: %s\r\n"
               "Content-Type: application/json\r\nContent-Length: 2\r\n" % key)
    if prefer:
        headers += "Prefer: %s\r\n" % prefer
    writer.write((headers + "Connection: close\r\n\r\n{}").encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    await reader.read()  # to the close
    writer.close()
    return int(head.split(b" ", 2)[1])


async def pair(port, key, mode, retry_s):
    # The first request waits too should the duplicate overtake it (then that one executes).
    first = asyncio.ensure_future(request(port, key, "wait=10"))
    await asyncio.sleep(0.005)  # the first request is upstream by now
    start = time.monotonic()
    if mode == "wait":
        status = await request(port, key, "wait=10")
    else:
        while True:
            status = await request(port, key)
            if status != 409:
                break
            await asyncio.sleep(retry_s)
    elapsed = time.monotonic() - start
    assert status == 201, "duplicate answered %d" % status
    first_status = await first
    assert first_status == 201, "first request answered %d" % first_status
    return elapsed


async def scenario(port, mode, args, run):
    sem = asyncio.Semaphore(args.concurrency)

    async def one(i):
        async with sem:
            return await pair(port, "dup-%s-%d-%d" % (mode, run, i), mode, args.retry_ms / 1000.0)

    return await asyncio.gather(*(one(i) for i in range(args.pairs)))


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def waiters(admin_port):
    reader, writer = await asyncio.open_connection("127.0.0.1", admin_port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    data = await reader.read(-1)
    writer.close()
    for line in data.decode().splitlines():
        if line.startswith("idemgate_waiters "):
            return int(float(line.split()[1]))
    return -1


async def park(port, admin_port, pid, origin, n):
    """RSS growth while `n` duplicates wait for one key whose first request is held upstream."""
    origin.hold = asyncio.Event()
    first = asyncio.ensure_future(request(port, "park"))
    while origin.requests == 0:
        await asyncio.sleep(0.01)
    before = rss_kib(pid)
    conns = []
    for i in range(n):
        conns.append(asyncio.ensure_future(request(port, "park", "wait=25")))
        if i % 500 == 499:
            await asyncio.sleep(0.05)
    # Until every duplicate is parked, or their number stops growing (connections refused).
    parked, last, deadline = 0, -1, time.monotonic() + 60
    while parked < n and time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        last, parked = parked, await waiters(admin_port)
        if parked == last:
            break
    after = rss_kib(pid)
    origin.hold.set()
    statuses = await asyncio.gather(first, *conns, return_exceptions=True)
    replayed = sum(1 for s in statuses[1:] if s == 201)
    print("(%d of %d parked duplicates replayed)" % (replayed, n), file=sys.stderr)
    return before, after, parked


def summary(name, times):
    ms = sorted(t * 1000 for t in times)
    q = lambda p: ms[min(len(ms) - 1, int(p * len(ms)))]
    return "| %s | %d | %.1f | %.1f | %.1f | %.1f |" % (name, len(ms), statistics.median(ms),
                                                     q(0.9), q(0.99), ms[-1])


async def main_async(args, tmp, procs):
    origin = Origin(args.delay_ms / 1000.0)
    server = await asyncio.start_server(origin.serve, "127.0.0.1", 0, backlog=4096)
    upstream_port = server.sockets[0].getsockname()[1]
    port, admin_port = B.free_ports(2)
    conf = os.path.join(tmp, "idemgate.toml")
    with open(conf, "w") as f:
        f.write(CONFIG % {"port": port, "admin": admin_port, "up": upstream_port,
                          "store": os.path.join(tmp, "store"), "n": max(args.park * 2, 10000)})
    out = os.path.join(tmp, "idemgate.out")
    p = procs.start([args.bin, "--config", conf], out)
    B.wait_line(out, "listening on", p)
    results = {}
    for run, mode in enumerate(["wait", "retry", "wait", "retry"]):
        results.setdefault(mode, []).extend(await scenario(port, mode, args, run))
    print("## Duplicates while the first request is upstream (origin answers after %d ms)\n"
          % args.delay_ms)
    print("| client | duplicates | median ms | p90 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|")
    print(summary("`Prefer: wait=10`", results["wait"]))
    print(summary("retries 409 after %d ms" % args.retry_ms, results["retry"]))
    print("\nOrigin executions: %d for %d keys (each once)." % (origin.requests, 4 * args.pairs))
    before, after, parked = await park(port, admin_port, p.pid, origin, args.park)
    print("\n## Memory of parked waiters\n")
    print("%d duplicates waiting on one key: gateway RSS %.1f MiB -> %.1f MiB, %.2f KiB per waiter "
          "(its connection, parser and request; nothing else per waiter)."
          % (parked, before / 1024.0, after / 1024.0, (after - before) / float(max(1, parked))))
    server.close()


CONFIG = """[listen]
address = "127.0.0.1:%(port)d"
[upstream]
url = "http://127.0.0.1:%(up)d"
[idempotency]
max_wait = "30s"
[store]
path = "%(store)s"
[limits]
max_connections = %(n)d
max_waiters = %(n)d
[server]
workers = 2
shutdown_grace = "1s"
[admin]
address = "127.0.0.1:%(admin)d"
[log]
access = "off"
"""


def main(argv):
    args = parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the gateway inherits it
    if hard < args.park + 1000:  # each process: the driver and the gateway
        sys.exit("ulimit -Hn %d is too low for --park %d" % (hard, args.park))
    tmp = tempfile.mkdtemp(prefix="idemgate-dup-bench-")
    procs = B.Procs()
    try:
        asyncio.run(main_async(args, tmp, procs))
    finally:
        procs.stop_all()
        if not args.keep:
            subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main(sys.argv[1:])
