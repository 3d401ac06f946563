# SPDX-License-Identifier: Apache-2.0
# Helpers for bench/http/http_bench.py: processes, ports, /proc readings, probes, wrk runs.
import glob
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BODY = ('{"id":"pi_3NtYvqLkdIwHu7ix0bench01","object":"payment_intent","amount":100000,'
        '"currency":"usd","status":"requires_confirmation","customer":"cus_bench",'
        '"created":1700000000,"livemode":false,"metadata":{"order":"bench-0001"},'
        '"payment_method_types":["card"],"capture_method":"automatic",'
        '"confirmation_method":"automatic"}')


def free_ports(n):
    """Returns n distinct free TCP ports on 127.0.0.1 (held together while choosing)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def black_hole():
    """A listening socket that never accepts: connects succeed, requests never get answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4096)
    return s


def render(template, out_path, values):
    with open(os.path.join(HERE, template)) as f:
        text = f.read()
    for k, v in values.items():
        text = text.replace("@%s@" % k, str(v))
    with open(out_path, "w") as f:
        f.write(text)
    return out_path


def wait_port(port, proc, deadline_s=10.0):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError("process exited with %s before listening" % proc.returncode)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("port %d not listening after %.0fs" % (port, deadline_s))


def wait_line(path, needle, proc, deadline_s=20.0):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError("exited with %s: %s" % (proc.returncode, open(path).read()[-2000:]))
        if os.path.exists(path) and needle in open(path).read():
            return
        time.sleep(0.05)
    raise RuntimeError("no '%s' in %s after %.0fs" % (needle, path, deadline_s))


class Procs:
    """Everything started; stop_all() ends them (TERM, then KILL after a deadline)."""

    def __init__(self):
        self.procs = []

    def start(self, argv, log_path):
        log = open(log_path, "ab")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def stop(self, p, deadline_s=5.0):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(deadline_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def stop_all(self):
        for p in reversed(self.procs):
            self.stop(p)


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def user_sys_seconds(pids):
    """(utime, stime) of the given processes (all their threads), in seconds."""
    user = system = 0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            user += int(fields[11])
            system += int(fields[12])
        except OSError:
            pass
    tck = os.sysconf("SC_CLK_TCK")
    return user / tck, system / tck


def cpu_seconds(pids):
    """utime + stime of the given processes (all their threads), in seconds."""
    return sum(user_sys_seconds(pids))


# Thread groups of a gateway, by the names it gives its threads (common/thread_name.h).
THREAD_GROUPS = [("workers", "idg-worker-"), ("store", "idg-store"), ("rocksdb bg", "rocksdb:"),
                 ("access log", "idg-accesslog")]


def _by_thread_group(pid, read):
    """{group: sum of read(task dir)} over `pid`'s threads by THREAD_GROUPS, the rest under
    "other"; a thread that ends meanwhile is left out."""
    out = {g: 0 for g, _ in THREAD_GROUPS}
    out["other"] = 0
    for task in glob.glob("/proc/%d/task/*" % pid):
        try:
            with open(task + "/comm") as f:
                comm = f.read()
            value = read(task)
        except (OSError, ValueError, IndexError):
            continue
        out[next((g for g, p in THREAD_GROUPS if comm.startswith(p)), "other")] += value
    return out


def _stat_ticks(task):
    with open(task + "/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _schedstat_ns(task):
    with open(task + "/schedstat") as f:
        return int(f.read().split()[0])


def thread_group_cpu_seconds(pid):
    """{group: utime + stime} of `pid`'s threads by THREAD_GROUPS, the rest under "other"."""
    tick = os.sysconf("SC_CLK_TCK")
    return {g: v / tick for g, v in _by_thread_group(pid, _stat_ticks).items()}


def thread_group_run_seconds(pid):
    """{group: time on a CPU} of `pid`'s threads, from /proc/.../schedstat: the scheduler's own
    clock, in ns, where utime + stime are ticks (10 ms here) charged to whoever runs when one
    fires, which is noise for a thread that runs 100 us at a time."""
    return {g: v / 1e9 for g, v in _by_thread_group(pid, _schedstat_ns).items()}


def context_switches(pids):
    """Voluntary + involuntary context switches of every thread of the given processes (a thread
    handing work to another and sleeping until the answer shows here)."""
    total = 0
    for pid in pids:
        for status in glob.glob("/proc/%d/task/*/status" % pid):
            try:
                with open(status) as f:
                    for line in f:
                        if line.startswith(("voluntary_ctxt_switches:",
                                            "nonvoluntary_ctxt_switches:")):
                            total += int(line.split()[1])
            except OSError:
                pass
    return total


def proc_status_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def fdatasync_probe(directory, n=200, busy_cpu=False):
    """Latency of write(64 B) + fdatasync on a file in `directory`: (p50, p99, mean) in ms.
    busy_cpu: meanwhile one process spins on a CPU. On a VM that wakes an idle vCPU for an I/O
    completion only at its next timer tick, that alone changes the answer (4 ms -> 0.2 ms here),
    which shows the sync's latency is the VM's, not the disk's."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy_cpu else None
    try:
        if spinner:
            time.sleep(0.2)
        return _fdatasync_samples(directory, n)
    finally:
        if spinner:
            spinner.kill()
            spinner.wait()


def _fdatasync_samples(directory, n):
    path = os.path.join(directory, "fdatasync.probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    samples = []
    try:
        for _ in range(n):
            t = time.perf_counter()
            os.write(fd, b"x" * 64)
            os.fdatasync(fd)
            samples.append((time.perf_counter() - t) * 1000.0)
    finally:
        os.close(fd)
        os.unlink(path)
    samples.sort()
    return samples[len(samples) // 2], samples[int(len(samples) * 0.99) - 1], statistics.mean(samples)


def post(port, path, headers, body="{}", timeout=10.0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


REQ_BODY = '{"amount":"100000","currency":"usd","customer":"cus_bench"}'  # as in requests.lua


def preload_replay(port, nkeys, nthreads=8):
    """Completes keys replay-0..nkeys-1 (scope "Bearer sk_bench"); returns status counts."""
    counts = {}
    lock = threading.Lock()

    def work(start):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for i in range(start, nkeys, nthreads):
            c.request("POST", "/v1/payments", body=REQ_BODY,
                      headers={"Content-Type": "application/json",
                               "Authorization": "Bearer sk_bench",
                               "Idempotency-Key": "replay-%d" % i})
            r = c.getresponse()
            r.read()
            with lock:
                counts[r.status] = counts.get(r.status, 0) + 1
        c.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return counts


def run_wrk(port, mode, prefix, duration, threads, conns, nkeys=1000, log=None):
    """Runs wrk against 127.0.0.1:port; returns the dict printed by requests.lua's done()."""
    argv = ["wrk", "-t%d" % threads, "-c%d" % conns, "-d%ds" % duration, "--latency",
            "-s", os.path.join(HERE, "requests.lua"), "http://127.0.0.1:%d/v1/payments" % port,
            "--", mode, prefix, str(nkeys)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60)
    if log:
        with open(log, "a") as f:
            f.write("$ %s\n%s%s\n" % (" ".join(argv), out.stdout, out.stderr))
    for line in out.stdout.splitlines():
        if line.startswith("BENCHJSON "):
            r = json.loads(line[len("BENCHJSON "):])
            r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
            return r
    raise RuntimeError("wrk failed: %s %s" % (out.stdout[-1000:], out.stderr[-1000:]))


def perf_record(pids, data, seconds):
    """Starts `perf record` (DWARF call graphs, 499 Hz) of `pids` for `seconds` into `data`;
    returns the process, to wait() on once the load has run. PERF_FREQ=N samples at N Hz, and
    PERF_NOCG=1 records no call graphs (flat profiles with more samples)."""
    graphs = [] if os.environ.get("PERF_NOCG") else ["--call-graph", "dwarf,16384"]
    return subprocess.Popen(["perf", "record", "-F", os.environ.get("PERF_FREQ", "499"), *graphs,
                             "-p", ",".join(str(pid) for pid in pids), "-o", data, "--", "sleep",
                             str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def perf_report(data, out_path, children=False):
    """A flat `perf report` of `data` (self cost, or with children) into `out_path`."""
    with open(out_path, "w") as f:
        subprocess.run(["perf", "report", "-i", data, "--stdio", "--percent-limit", "0.7", "-g",
                        "none", "--children" if children else "--no-children"], stdout=f,
                       stderr=subprocess.DEVNULL)
