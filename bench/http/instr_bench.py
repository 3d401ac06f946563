# SPDX-License-Identifier: Apache-2.0
# Instructions per request, deterministic (no hardware counters needed): each idemgate binary runs
# under valgrind --tool=callgrind behind the bench's nginx origin; per scenario the counters are
# zeroed (callgrind_control -z), N requests are sent on one keep-alive connection, and the counters
# dumped (callgrind_control -d). Instructions of all the gateway's threads (store included) / N.
# Usage: python3 bench/http/instr_bench.py --bin A [--bin B ...] [--requests 2000]
#   [--access-log off|on|both] [--keep DIR: callgrind outputs for callgrind_annotate]
#   [--nginx: also the baseline nginx proxy's passthrough, run the same way]
import argparse
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile

import bench_report
import benchlib as B
import http_bench as H


def send(port, scenario, prefix, n):
    """n requests on one keep-alive connection, each written whole in one send (as wrk does:
    http.client writes the head and the body separately, and an upstream that answers before
    the body left makes the gateway drop that upstream connection, a reconnect whose cost
    would vary from run to run)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    f = s.makefile("rb")
    codes = {}
    for i in range(n):
        head = ["POST /v1/payments HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
                "Content-Length: %d" % len(B.REQ_BODY)]
        if scenario != "passthrough":
            head.append("Authorization: Bearer sk_bench")
        if scenario == "fresh":
            head.append("Idempotency-Key: %s-%d" % (prefix, i))
        elif scenario == "replay":
            head.append("Idempotency-Key: replay-%d" % (i % 100))
        s.sendall(("\r\n".join(head) + "\r\n\r\n" + B.REQ_BODY).encode())
        status = int(f.readline().split()[1])
        length = 0
        while True:
            line = f.readline()
            if line in (b"\r\n", b""):
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        f.read(length)
        codes[status] = codes.get(status, 0) + 1
    f.close()
    s.close()
    return codes


def instructions(tmp, pid, label):
    """Dumps callgrind's counters (since the last zeroing) and returns the total Ir."""
    subprocess.run(["callgrind_control", "-d", label, str(pid)], check=True,
                   capture_output=True, timeout=300)
    newest = max(glob.glob(os.path.join(tmp, "cg.out.%d*" % pid)), key=os.path.getmtime)
    with open(newest) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError("no totals in " + newest)


def measure(args, procs, tmp, up_port, binary, idx, logged):
    port = B.free_ports(1)[0]
    conf = B.render("idemgate.toml", os.path.join(tmp, "g%d.toml" % idx),
                    {"PORT": port, "UPSTREAM_PORT": up_port, "WORKERS": 1, "SYNC": "true",
                     "STORE": os.path.join(tmp, "store%d" % idx),
                     "ACCESS": os.path.join(tmp, "g%d.access.log" % idx) if logged else "off"})
    out = os.path.join(tmp, "g%d.out" % idx)
    p = procs.start(["valgrind", "--tool=callgrind", "--compress-strings=no",
                     "--callgrind-out-file=" + os.path.join(tmp, "cg.out.%p"),
                     binary, "--config", conf], out)
    B.wait_line(out, "listening on", p, deadline_s=300)
    assert send(port, "replay", "", 100) == {201: 100}  # completes replay-0..99
    row = {}
    for sc in args.scenarios.split(","):
        send(port, sc, "warm-%s" % sc, 200)
        subprocess.run(["callgrind_control", "-z", str(p.pid)], check=True, capture_output=True,
                       timeout=300)
        codes = send(port, sc, "m-%s" % sc, args.requests)
        ir = instructions(tmp, p.pid, sc)
        H.check(codes == {201: args.requests}, "%s %s: %s" % (binary, sc, codes))
        row[sc] = ir / args.requests
        H.log("%s %s: %.0f instructions/request" % (binary, sc, row[sc]))
    procs.stop(p, deadline_s=60)
    return row


def measure_nginx(args, procs, tmp, vals, idx, logged):
    """The baseline nginx proxy (1 worker, run as its own master: master_process off) under
    callgrind, passthrough only: what a relayed request costs the proxy idemgate is compared to."""
    port = B.free_ports(1)[0]
    v = dict(vals, PROXY_PORT=port, PID=os.path.join(tmp, "px%d.pid" % idx),
             ACCESS_LOG=H.access_log_path(tmp, "px%d" % idx, logged))
    conf = B.render("nginx_proxy.conf", os.path.join(tmp, "px%d.conf" % idx), v)
    with open(conf) as f:
        text = f.read().replace("master_process on;", "master_process off;")
    with open(conf, "w") as f:
        f.write(text)
    p = procs.start(["valgrind", "--tool=callgrind", "--callgrind-out-file=" +
                     os.path.join(tmp, "cg.out.%p"), "nginx", "-e",
                     os.path.join(tmp, "px%d.err" % idx), "-p", tmp, "-c", conf],
                    os.path.join(tmp, "px%d.out" % idx))
    B.wait_port(port, p)
    send(port, "passthrough", "", 200)
    subprocess.run(["callgrind_control", "-z", str(p.pid)], check=True, capture_output=True,
                   timeout=300)
    codes = send(port, "passthrough", "", args.requests)
    ir = instructions(tmp, p.pid, "passthrough")
    H.check(codes == {201: args.requests}, "nginx passthrough: %s" % codes)
    H.log("nginx passthrough: %.0f instructions/request" % (ir / args.requests))
    procs.stop(p, deadline_s=60)
    return ir / args.requests


def main(argv):
    ap = argparse.ArgumentParser(prog="instr_bench.py")
    ap.add_argument("--bin", action="append", required=True, help="idemgate binary (repeat)")
    ap.add_argument("--requests", type=int, default=2000, help="requests per scenario")
    ap.add_argument("--scenarios", default="passthrough,fresh,replay")
    ap.add_argument("--access-log", choices=["off", "on", "both"], default="off",
                    help="each binary with log.access off, on (a file), or both")
    ap.add_argument("--keep", metavar="DIR", default="",
                    help="copy the callgrind outputs (cg.out.*) to DIR")
    ap.add_argument("--nginx", action="store_true",
                    help="also the baseline nginx proxy, passthrough (each access-log mode)")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="idemgate-instr-")
    procs, hole = B.Procs(), B.black_hole()
    try:
        up_port, px_port = B.free_ports(2)
        vals = {"USER": "user root;" if os.geteuid() == 0 else "", "DIR": tmp,
                "UPSTREAM_PORT": up_port, "PROXY_PORT": px_port,
                "HOLE_PORT": hole.getsockname()[1], "BODY": B.BODY}
        up = H.start_nginx(procs, tmp, "nginx_upstream.conf", "upstream", vals)
        B.wait_port(up_port, up)
        modes = {"off": [False], "on": [True], "both": [False, True]}[args.access_log]
        runs = [(b, logged) for logged in modes for b in args.bin]
        rows = [measure(args, procs, tmp, up_port, b, i, logged)
                for i, (b, logged) in enumerate(runs)]
        scs = args.scenarios.split(",")
        print("\n| binary | access log | " + " | ".join("%s instr/req" % s for s in scs) + " |")
        print("|---|---|" + "---:|" * len(scs))
        for (b, logged), row in zip(runs, rows):
            print("| %s | %s | %s |" % (bench_report.build_info(b), "on" if logged else "off",
                                        " | ".join("%.0f" % row[s] for s in scs)))
        n = len(args.bin)
        for m in range(len(modes)) if n > 1 else []:
            first, last = rows[m * n], rows[m * n + n - 1]
            print("| ratio last/first | %s | %s |" % ("on" if modes[m] else "off", " | ".join(
                "%.3f" % (last[s] / first[s]) for s in scs)))
        for m, logged in enumerate(modes if args.nginx else []):
            print("| nginx proxy (1 worker), passthrough only | %s | %.0f |" % (
                "on" if logged else "off", measure_nginx(args, procs, tmp, vals, m, logged)))
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            for f in glob.glob(os.path.join(tmp, "cg.out.*")):
                shutil.copy(f, args.keep)
        print("\n%d requests per scenario after 200 warm-up, one keep-alive connection, store.sync"
              " = true, valgrind --tool=callgrind (all threads)" % args.requests)
        return 0
    finally:
        procs.stop_all()
        hole.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
