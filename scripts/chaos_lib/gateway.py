# SPDX-License-Identifier: Apache-2.0
"""Gateway processes under test: the real idemgate (with the fault shim preloaded), or a planted
faulty one for --self-test. Each is (re)started on the same port and the same store."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import http.client

LEASE_S = 3
RESPONSE_TIMEOUT_S = 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probe(port, timeout=1.0):
    """True when the gateway answers an unguarded GET (proxied to the upstream)."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("GET", "/health")
        ok = c.getresponse().status == 200
        c.close()
        return ok
    except (OSError, http.client.HTTPException):
        return False


class FaultControl:
    """The fault shim's control file, rewritten atomically (write, then rename)."""

    def __init__(self, path):
        self.path = path
        self.values = {}
        self.write()

    def set(self, **kv):
        self.values.update(kv)
        self.write()

    def write(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            for k, v in self.values.items():
                f.write(f"{k} = {v}\n")
        os.rename(tmp, self.path)


class Process:
    """Common start/kill/pause/ready logic; subclasses give argv, env and on_kill."""

    def __init__(self, workdir, upstream_port, tag=""):
        self.workdir = workdir
        self.upstream_port = upstream_port
        self.tag = tag  # "" for the only gateway; "0", "1"... for several
        self.port = free_port()
        self.proc = None
        self.expected_exit = False
        self.log_path = os.path.join(workdir, f"gateway{tag}.log")
        self.log = open(self.log_path, "ab")

    def start(self, deadline_s):
        """Starts the process; returns seconds until it answered, or None past deadline_s."""
        self.expected_exit = False
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.argv(), env=self.env(), stdout=self.log,
                                     stderr=subprocess.STDOUT, cwd=self.workdir)
        while time.monotonic() - t0 < deadline_s:
            if probe(self.port, 0.5):
                return time.monotonic() - t0
            if self.proc.poll() is not None:
                return None
            time.sleep(0.02)
        return None

    def died_on_its_own(self):
        return (self.proc is not None and not self.expected_exit
                and self.proc.poll() is not None)

    def kill(self):
        self.expected_exit = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.on_kill()

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def stop(self):
        self.expected_exit = True
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def on_kill(self):
        pass

    def env(self):
        return dict(os.environ)


def private_file(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def encryption_toml(workdir):
    """Encryption at rest on (docs/encryption.md): a scope secret and one active key, the same
    files for every instance of the campaign (instances on one database must share them)."""
    secret = os.path.join(workdir, "scope.secret")
    key = os.path.join(workdir, "chaos.key")
    if not os.path.exists(key):
        private_file(secret, "chaos-scope-secret-" + "c" * 24)
        private_file(key, os.urandom(32).hex() + "\n")
    return f"""[scope]
secret_file = "{secret}"
[store.encryption]
active = "chaos"
keys = {{ "chaos" = "{key}" }}
"""


class Idemgate(Process):
    """idemgate on its own RocksDB store (store_dir), or on PostgreSQL when pg_dsn is given."""

    def __init__(self, workdir, upstream_port, binary, shim, takeover, store_dir, wipe_on_kill=False,
                 tag="", pg_dsn=None, encrypted=False):
        super().__init__(workdir, upstream_port, tag)
        self.binary, self.shim, self.store_dir = binary, shim, store_dir
        self.wipe_on_kill = wipe_on_kill
        self.fault_file = os.path.join(workdir, f"faults{tag}")
        self.faults = FaultControl(self.fault_file)
        self.config = os.path.join(workdir, f"idemgate{tag}.toml")
        # Each exchange's line (outcome, attempt, latencies, key_hash): the evidence a violation
        # is read against; kept with the work directory.
        self.access_log = os.path.join(workdir, f"access{tag}.log")
        backend = "" if pg_dsn is None else f"""backend = "postgres"
[store.postgres]
dsn = "{pg_dsn}"
connections = 4
"""
        with open(self.config, "w") as f:
            f.write(f"""[listen]
address = "127.0.0.1:{self.port}"
[upstream]
url = "http://127.0.0.1:{upstream_port}"
connect_timeout = "1s"
response_timeout = "{RESPONSE_TIMEOUT_S}s"
[idempotency]
lease = "{LEASE_S}s"
ttl = "24h"
takeover = {"true" if takeover else "false"}
[store]
path = "{store_dir}"
sync = true
{backend}[server]
workers = 2
shutdown_grace = "2s"
[admin]
address = ""
[log]
access = "{self.access_log}"
""" + (encryption_toml(workdir) if encrypted else ""))

    def argv(self):
        return [self.binary, "--config", self.config]

    def env(self):
        e = dict(os.environ)
        if self.shim:
            e["LD_PRELOAD"] = self.shim
            e["IDEMGATE_FAULT_FILE"] = self.fault_file
            # An ASan build's shim links the ASan runtime, which aborts a process where it does not
            # come first among the preloaded libraries (harmless elsewhere).
            asan = e.get("ASAN_OPTIONS", "")
            e["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
        return e

    def on_kill(self):
        if self.wipe_on_kill:  # the planted fault: the store does not survive a crash
            for name in os.listdir(self.store_dir):
                p = os.path.join(self.store_dir, name)
                shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)


class PlantedProxy(Process):
    """A python proxy with no idempotency that also invents some answers and, on its third
    start, does not come back."""

    def __init__(self, workdir, upstream_port, chaos_script):
        super().__init__(workdir, upstream_port)
        self.script = chaos_script
        self.starts = 0

    def argv(self):
        self.starts += 1
        return [sys.executable, self.script, "--planted-proxy", str(self.port),
                str(self.upstream_port), str(self.starts)]
