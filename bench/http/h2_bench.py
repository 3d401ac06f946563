# SPDX-License-Identifier: Apache-2.0
# scripts/bench h2: HTTP/2 over TLS from clients, nginx (`listen ... ssl http2`) vs idemgate,
# same certificate, same origin (bench/http/nginx_upstream.conf), same run, with h2load
# (Debian nghttp2-client): passthrough (POST, no key) and replay (POST, one completed key)
# req/s and the ratio to nginx, rounds alternating the targets; and, before those, memory per
# idle HTTP/2 connection (N connections opened and left idle: the RSS they add / N). Prints
# Markdown.
import argparse
import os
import re
import resource
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import shutil

import benchlib as B
import http_bench as H


def log(msg):
    print("[bench h2 %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="scripts/bench h2")
    p.add_argument("--bin", required=True, help="idemgate binary")
    p.add_argument("--duration", type=int, default=10, help="seconds per h2load run (default 10)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument("--clients", type=int, default=16, help="h2load connections (default 16)")
    p.add_argument("--streams", type=int, default=4,
                   help="h2load concurrent streams per connection (default 4: 64 in flight, as "
                        "the http benchmark's 64 connections)")
    p.add_argument("--threads", type=int, default=1, help="h2load threads (default 1)")
    p.add_argument("--idle", type=int, default=1000, help="idle connections to open (default 1000)")
    p.add_argument("--perf", metavar="DIR", default="",
                   help="after the rounds, perf-record each proxy (nginx: its worker) under "
                        "passthrough for --duration s; data and reports go to DIR")
    p.add_argument("--keep", action="store_true", help="keep the temp dir")
    return p.parse_args(argv)


def make_cert(tmp):
    cert, key = os.path.join(tmp, "h2.crt"), os.path.join(tmp, "h2.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", key,
                    "-out", cert], check=True, capture_output=True)
    return cert, key


def start_gateway(procs, args, tmp, upstream_port, cert, key):
    port = B.free_ports(1)[0]
    vals = {"PORT": port, "UPSTREAM_PORT": upstream_port, "STORE": os.path.join(tmp, "store"),
            "WORKERS": 1, "SYNC": "true", "ACCESS": "off"}
    conf = B.render("idemgate.toml", os.path.join(tmp, "idemgate-h2.toml"), vals)
    with open(conf) as f:
        text = f.read()
    text = text.replace("[listen]\n", '[listen]\ntls_cert = "%s"\ntls_key = "%s"\n' % (cert, key), 1)
    text += '\n[limits]\nidle_timeout = "10m"\n'
    with open(conf, "w") as f:
        f.write(text)
    out = os.path.join(tmp, "idemgate-h2.out")
    p = procs.start([args.bin, "--config", conf], out)
    B.wait_line(out, "listening on", p)
    return H.Target("idemgate", [port], [p], lambda: [p.pid])


def start_nginx(procs, tmp, vals, cert, key):
    port = B.free_ports(1)[0]
    v = dict(vals, PROXY_PORT=port, PID=os.path.join(tmp, "h2proxy.pid"), CERT=cert, KEY=key)
    p = H.start_nginx(procs, tmp, "nginx_h2.conf", "h2proxy", v)
    B.wait_port(port, p)
    return H.Target("nginx", [port], [p], lambda: [p.pid] + B.children(p.pid))


def curl_post(port, key):
    """One POST over h2 (TLS, not verified); (status, replayed?)."""
    argv = ["curl", "-sk", "--http2", "-o", "/dev/null", "-D", "-", "-X", "POST",
            "-H", "Content-Type: application/json", "--data-binary", B.REQ_BODY]
    if key:
        argv += ["-H", "Authorization: Bearer sk_bench", "-H", "Idempotency-Key: " + key]
    out = subprocess.run(argv + ["https://127.0.0.1:%d/v1/payments" % port],
                         capture_output=True, text=True).stdout
    m = re.match(r"HTTP/2 (\d+)", out)
    return (int(m.group(1)) if m else 0), "idempotent-replayed: true" in out.lower()


def h2load(args, tmp, port, scenario):
    body = os.path.join(tmp, "body.json")
    with open(body, "w") as f:
        f.write(B.REQ_BODY)
    argv = ["h2load", "-D", str(args.duration), "-c", str(args.clients), "-m", str(args.streams),
            "-t", str(args.threads), "-d", body, "-H", "content-type: application/json"]
    if scenario == "replay":
        argv += ["-H", "authorization: Bearer sk_bench", "-H", "idempotency-key: replay-7"]
    argv.append("https://127.0.0.1:%d/v1/payments" % port)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=args.duration + 120).stdout
    with open(os.path.join(tmp, "h2load.log"), "a") as f:
        f.write("$ %s\n%s\n" % (" ".join(argv), out))
    rps = re.search(r"finished in [\d.]+s, ([\d.]+) req/s", out)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    proto = re.search(r"Application protocol: (\S+)", out)
    if not rps or not codes:
        raise RuntimeError("h2load failed: %s" % out[-1500:])
    non2xx = sum(int(codes.group(i)) for i in (2, 3, 4))
    return {"rps": float(rps.group(1)), "non2xx": non2xx,
            "proto": proto.group(1) if proto else "?"}


def profile(args, tmp, target):
    os.makedirs(args.perf, exist_ok=True)
    data = os.path.join(args.perf, "perf-h2-passthrough-%s.data" % target.name)
    perf = B.perf_record(target.pids(), data, args.duration)
    time.sleep(0.5)
    h2load(args, tmp, target.port, "passthrough")
    perf.wait()
    B.perf_report(data, os.path.join(args.perf, "report-h2-passthrough-%s.txt" % target.name))
    log("perf data for %s in %s" % (target.name, data))


def children_cpu():
    """CPU seconds of the finished child processes (h2load runs), user and system."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def rss_kib(target):
    return sum(B.proc_status_kib(pid, "VmRSS") for pid in target.pids())


def idle_connections(target, n):
    """Opens n TLS connections, ALPN h2, each with the preface and SETTINGS sent and the
    server's SETTINGS read; returns the RSS they added per connection (KiB), closing them."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    time.sleep(1)
    before = rss_kib(target)
    socks = []
    try:
        for _ in range(n):
            s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", target.port), timeout=10))
            if s.selected_alpn_protocol() != "h2":
                raise RuntimeError("%s did not select h2" % target.name)
            s.sendall(preface)
            s.recv(4096)  # the server's SETTINGS
            socks.append(s)
        time.sleep(2)
        after = rss_kib(target)
    finally:
        for s in socks:
            s.close()
    return (after - before) / n


def main(argv):
    args = parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="idemgate-bench-h2-")
    procs = B.Procs()
    hole = B.black_hole()
    load0 = B.loadavg()
    log("temp dir %s; load %s" % (tmp, load0))
    try:
        cert, key = make_cert(tmp)
        up_port = B.free_ports(1)[0]
        user = "user root;" if os.geteuid() == 0 else ""
        vals = {"USER": user, "DIR": tmp, "UPSTREAM_PORT": up_port,
                "HOLE_PORT": hole.getsockname()[1], "BODY": B.BODY}
        os.makedirs(os.path.join(tmp, "origin", "big"))
        up = H.start_nginx(procs, tmp, "nginx_upstream.conf", "upstream", vals)
        B.wait_port(up_port, up)
        up_pids = [up.pid] + B.children(up.pid)
        targets = [start_nginx(procs, tmp, vals, cert, key),
                   start_gateway(procs, args, tmp, up_port, cert, key)]
        gw = targets[1]
        H.check(curl_post(gw.port, "replay-7") == (201, False), "first POST of replay-7")
        H.check(curl_post(gw.port, "replay-7") == (201, True), "replay of replay-7")
        H.check(curl_post(targets[0].port, "")[0] == 201, "nginx over h2")
        # Before the load runs, so neither reuses memory the rounds touched and freed.
        idle = {t.name: idle_connections(t, args.idle) for t in targets}
        for name, kib in idle.items():
            log("idle h2 connections: %s %.1f KiB each" % (name, kib))
        results = {}
        for rnd in range(args.rounds):
            for sc in ("passthrough", "replay"):
                for t in (targets if rnd % 2 == 0 else list(reversed(targets))):
                    c0 = B.cpu_seconds(t.pids())
                    u0 = B.cpu_seconds(up_pids)
                    h0 = children_cpu()
                    # nginx has no replay: its row is a proxied POST.
                    r = h2load(args, tmp, t.port, "passthrough" if t.name == "nginx" else sc)
                    n = max(r["rps"] * args.duration, 1)
                    r["cpu_us"] = (B.cpu_seconds(t.pids()) - c0) * 1e6 / n
                    # Where the rest of the two cores went: the origin's and h2load's CPU.
                    r["up_us"] = (B.cpu_seconds(up_pids) - u0) * 1e6 / n
                    r["client_us"] = (children_cpu() - h0) * 1e6 / n
                    results.setdefault((sc, t.name), []).append(r)
                    log("%-11s %-8s %9.0f req/s  cpu %.1f us/req (origin %.1f, h2load %.1f)  "
                        "non2xx %d  %s  load %s" % (
                            sc, t.name, r["rps"], r["cpu_us"], r["up_us"], r["client_us"],
                            r["non2xx"], r["proto"], B.loadavg()))
        if args.perf:
            for t in targets:
                profile(args, tmp, t)
        print(report(args, results, idle, load0, B.loadavg()))
        return 0
    finally:
        procs.stop_all()
        hole.close()
        if args.keep:
            log("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def report(args, results, idle, load0, load1):
    commit = subprocess.run(["git", "-C", os.path.dirname(__file__), "rev-parse", "--short",
                             "HEAD"], capture_output=True, text=True).stdout.strip()
    out = ["## scripts/bench h2 (%s, commit %s, %d cores, load %s -> %s)\n" % (
               time.strftime("%Y-%m-%d %H:%M"), commit, os.cpu_count(), load0, load1),
           "h2load -D %d -c %d -m %d -t %d over TLS (ALPN h2), %d rounds alternating; req/s "
           "are medians of the rounds, the ratio the median of the per-round ratios (each "
           "round's idemgate / nginx). nginx has no idempotency: its replay row is the same "
           "proxied POST.\n" % (args.duration, args.clients, args.streams, args.threads,
                                args.rounds),
           "| scenario | nginx req/s | idemgate req/s | ratio (paired) | per-round ratios | "
           "CPU us/req nginx / idemgate | origin CPU us/req behind nginx / idemgate | "
           "h2load CPU us/req against nginx / idemgate | idemgate non-2xx |",
           "|---|---:|---:|---:|---|---|---|---|---:|"]
    for sc in ("passthrough", "replay"):
        ns = [r["rps"] for r in results[(sc, "nginx")]]
        gs = [r["rps"] for r in results[(sc, "idemgate")]]
        ratios = [g / n for g, n in zip(gs, ns) if n]
        bad = sum(r["non2xx"] for r in results[(sc, "idemgate")])
        med = {k: ["%.1f" % statistics.median(r[k] for r in results[(sc, name)])
                   for name in ("nginx", "idemgate")] for k in ("cpu_us", "up_us", "client_us")}
        out.append("| %s | %.0f | %.0f | %.2fx | %s | %s | %s | %s | %d |" % (
            sc, statistics.median(ns), statistics.median(gs), statistics.median(ratios),
            " ".join("%.2f" % x for x in ratios), " / ".join(med["cpu_us"]),
            " / ".join(med["up_us"]), " / ".join(med["client_us"]), bad))
    out += ["", "Idle HTTP/2 connections (%d, TLS + preface + SETTINGS, then idle): RSS added "
            "per connection: nginx %.1f KiB, idemgate %.1f KiB." % (
                args.idle, idle["nginx"], idle["idemgate"])]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
