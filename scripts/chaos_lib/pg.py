# SPDX-License-Identifier: Apache-2.0
"""A real PostgreSQL pair for the campaign: a primary and a streaming standby (synchronous, or
asynchronous for the planted fault), killed, restarted, failed over and rebuilt. Mirrors
tests/support/pg_cluster.cc (same initdb template, same settings; fsync off: the campaign kills
processes, never the machine). As root, the server runs as the `postgres` user."""
import ctypes
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time

from .gateway import free_port

SETTINGS = ("-c listen_addresses=127.0.0.1 -c shared_buffers=128MB -c max_connections=300 "
            "-c wal_level=replica -c max_wal_senders=5 -c hot_standby=on "
            "-c log_min_messages=warning -c fsync=off -c full_page_writes=off")
# Every standby connects as "standby": a promoted node waits for the next one (strict
# synchronous mode: nothing is acknowledged that only one node has).
STANDBY_NAME = "standby"


def bin_dir():
    env = os.environ.get("IDEMGATE_PG_BIN", "")
    if env:
        return env
    dirs = sorted(d for d in glob.glob("/usr/lib/postgresql/*/bin")
                  if os.path.exists(os.path.join(d, "postgres")))
    return dirs[-1] if dirs else ""


def alive(pid):
    """True while `pid` runs (a zombie, killed but not reaped yet, is not running)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def become_subreaper():
    """The servers daemonize (pg_ctl exits); orphaned, they would become children of PID 1,
    which here may never reap them, and a killed postmaster left as a zombie still "owns" its
    lock files, so a restart on the same directory or port fails. As the subreaper we reap
    them (reap_servers)."""
    PR_SET_CHILD_SUBREAPER = 36
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap_servers():
    """Reaps our exited PostgreSQL children (never a gateway: its Popen reaps it)."""
    for pid in children_of(os.getpid()):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read()
            if "(postgres)" in fields and fields.rsplit(")", 1)[1].split()[0] == "Z":
                os.waitpid(pid, os.WNOHANG)
        except (OSError, ChildProcessError, IndexError):
            pass


def children_of(pid):
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return kids


class PgCluster:
    def __init__(self, synchronous=True):
        self.bin = bin_dir()
        if not self.bin:
            raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql "
                               "(apt-get install postgresql)")
        self.synchronous = synchronous
        become_subreaper()
        self.root = tempfile.mkdtemp(prefix="chaos-pg-")
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self.ports = [free_port(), free_port()]
        self.listened = set()  # nodes that have listened on their port (it is in the DSN then)
        self.generation = [0, 0]
        self.primary, self.standby = 0, 1

    # -- plumbing ---------------------------------------------------------------------------
    def data(self, node):
        return os.path.join(self.root, f"n{node}-{self.generation[node]}")

    def run(self, *argv, check=True, timeout=120):
        cmd = list(argv)
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {out.stdout}{out.stderr}")
        return out.returncode == 0

    def sql(self, node, statement, timeout=10):
        """The first column of the first row, or None when the node does not answer."""
        try:
            out = subprocess.run([os.path.join(self.bin, "psql"), "-h", "127.0.0.1", "-p",
                                  str(self.ports[node]), "-U", "idemgate", "-d", "postgres",
                                  "-XAtc", statement], capture_output=True, text=True,
                                 timeout=timeout, env=dict(os.environ, PGCONNECT_TIMEOUT="2"))
        except subprocess.TimeoutExpired:
            return None
        return out.stdout.split("\n")[0] if out.returncode == 0 else None

    def wait_for(self, what, pred, timeout_s=60):
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if pred():
                return time.monotonic() - t0
            time.sleep(0.05)  # a server-side state: polled
        raise RuntimeError(f"PostgreSQL: {what} not within {timeout_s} s")

    def template(self):
        version = os.path.basename(os.path.dirname(self.bin))
        path = os.path.join(tempfile.gettempdir(),
                            f"idemgate-pg-template-{os.geteuid()}-{version}")
        if not os.path.exists(os.path.join(path, "PG_VERSION")):
            fresh = os.path.join(self.root, "template")
            self.run(os.path.join(self.bin, "initdb"), "-D", fresh, "-U", "idemgate",
                     "--auth=trust", "-N")
            try:
                os.rename(fresh, path)  # another process may have won the race: as good
            except OSError:
                pass
        return path

    def start_node(self, node):
        """Starts `node`. Its port was picked free at the start, but tests running alongside can
        take it before the node first listens: such a node moves to another free port."""
        reap_servers()
        for _ in range(3):
            opts = f"-p {self.ports[node]} -k {self.root} {SETTINGS}"
            if self.run(os.path.join(self.bin, "pg_ctl"), "-D", self.data(node), "-l",
                        self.data(node) + ".log", "-w", "-t", "60", "-o", opts, "start",
                        check=False):
                self.listened.add(node)
                return
            if node in self.listened or "Address already in use" not in self.log(node):
                break
            self.ports[node] = free_port()
        raise RuntimeError(f"PostgreSQL node {node} did not start: {self.log(node)[-2000:]}")

    def log(self, node):
        try:
            with open(self.data(node) + ".log", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def postmaster(self, node):
        try:
            with open(os.path.join(self.data(node), "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return 0

    # -- the cluster ------------------------------------------------------------------------
    def start(self):
        self.run("cp", "-a", self.template(), self.data(0))
        self.start_node(0)
        if self.synchronous:  # in every node's configuration from here on (base backups copy it)
            self.sql(0, f"ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 ({STANDBY_NAME})'")
            self.sql(0, "SELECT pg_reload_conf()")
        self.add_standby(1)

    def add_standby(self, node):
        """A fresh base backup of the primary into `node`, started and streaming (as a
        synchronous standby when the cluster is synchronous). Returns seconds taken."""
        t0 = time.monotonic()
        self.run(os.path.join(self.bin, "pg_basebackup"), "-h", "127.0.0.1", "-p",
                 str(self.ports[self.primary]), "-U", "idemgate", "-D", self.data(node), "-R",
                 "-X", "stream", "--no-sync", "--checkpoint=fast", "-d",
                 f"application_name={STANDBY_NAME}")
        self.start_node(node)
        self.standby = node
        want = "sync" if self.synchronous else "async"
        self.wait_for(f"the standby streaming as {want}", lambda: self.sql(
            self.primary, "SELECT sync_state FROM pg_stat_replication WHERE application_name = "
            f"'{STANDBY_NAME}' AND state = 'streaming'") == want)
        return time.monotonic() - t0

    def kill9(self, node):
        pm = self.postmaster(node)
        if pm <= 0:
            return
        kids = children_of(pm)
        for pid in [pm] + kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.wait_for("the killed postmaster reaped", lambda: reap_servers() or not (
            os.path.exists(f"/proc/{pm}") or any(os.path.exists(f"/proc/{k}") for k in kids)),
            10)

    def restart(self, node, crash):
        """The database restarted: SIGKILL (crash recovery) or a fast shutdown, then start."""
        if crash:
            self.kill9(node)
        else:
            self.run(os.path.join(self.bin, "pg_ctl"), "-D", self.data(node), "-m", "fast",
                     "-w", "stop")
        self.start_node(node)

    def walreceiver(self, node):
        v = self.sql(node, "SELECT pid FROM pg_stat_wal_receiver")
        return int(v) if v and v.isdigit() else 0

    def failover(self, freeze_s=0.0, on_killed=None):
        """Kills the primary (after freezing the standby's WAL receiver for freeze_s, as when
        the standby falls behind), promotes the standby, rebuilds the old primary as the new
        standby. Returns (seconds until the new primary took writes, seconds in all)."""
        t0 = time.monotonic()
        receiver = self.walreceiver(self.standby) if freeze_s > 0 else 0
        if receiver:
            os.kill(receiver, signal.SIGSTOP)
            time.sleep(freeze_s)  # the primary goes on (asynchronous) or waits (synchronous)
        old, new = self.primary, self.standby
        self.kill9(old)
        if on_killed:
            on_killed()
        if receiver:  # what the frozen receiver had not read dies with it
            try:
                os.kill(receiver, signal.SIGKILL)
            except ProcessLookupError:
                pass
            # The standby's postmaster resets after a killed child; a promote sent during the
            # reset is dropped: wait until it is back.
            self.wait_for("the standby back after its receiver was killed", lambda: (
                reap_servers() or not alive(receiver) and self.sql(new, "SELECT 1") == "1"))
        self.run(os.path.join(self.bin, "pg_ctl"), "-D", self.data(new), "-w", "-t", "60",
                 "promote")
        self.wait_for("the promoted standby taking writes",
                      lambda: self.sql(new, "SELECT pg_is_in_recovery()::text") == "false")
        promoted = time.monotonic() - t0
        self.primary = new
        shutil.rmtree(self.data(old), ignore_errors=True)
        self.generation[old] += 1
        self.add_standby(old)
        return promoted, time.monotonic() - t0

    def dsn(self):
        """Both nodes; libpq follows whichever is the primary. A gateway exits at start-up when
        no primary answers within connect_timeout: 2 s was too short on this loaded 2-core box
        (a 15-minute run saw one restart fail), 10 s is what an operator would set."""
        return ("host=127.0.0.1,127.0.0.1 port=" + ",".join(str(p) for p in self.ports) +
                " user=idemgate dbname=postgres target_session_attrs=read-write "
                "connect_timeout=10")

    def stop(self):
        for node in (0, 1):
            if self.postmaster(node):
                self.run(os.path.join(self.bin, "pg_ctl"), "-D", self.data(node), "-m",
                         "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)
