# SPDX-License-Identifier: Apache-2.0
"""A Patroni-managed PostgreSQL cluster for the campaign (--backend patroni): one etcd, three
PostgreSQL nodes each under its own Patroni, and HAProxy routing to whichever node's REST API
answers 200 to OPTIONS /primary. Mirrors tests/support/patroni_cluster.cc (same settings). The
campaign only kills, pauses and restarts processes and asks for switchovers: Patroni alone
decides whom to promote. synchronous=False plants the known danger (synchronous_mode off, any
lag accepted on failover). As root, etcd, Patroni and PostgreSQL run as the `postgres` user."""
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

from .gateway import free_port
from .pg import alive, become_subreaper, bin_dir, children_of, reap_servers

NODES = 3
TTL, LOOP_WAIT, RETRY_TIMEOUT = 12, 2, 5


def rest_status(port, method, path, timeout=2.0):
    """The status code of `method path` on a Patroni REST API (or etcd), 0 when no answer."""
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (OSError, ValueError):
        return 0


class PatroniCluster:
    def __init__(self, synchronous=True, logs_dir=None):
        self.bin = bin_dir()
        for need in (self.bin, "/usr/bin/patroni", "/usr/bin/etcd", "/usr/sbin/haproxy"):
            if not need or not os.path.exists(need):
                raise RuntimeError("--backend patroni needs postgresql, patroni, etcd-server and "
                                   "haproxy (apt-get install them; scripts/test does)")
        self.synchronous = synchronous
        become_subreaper()  # Patroni's PostgreSQL outlives a killed Patroni: we reap it
        base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self.root = tempfile.mkdtemp(prefix="chaos-patroni-", dir=base)
        self.as_pg = os.geteuid() == 0
        if self.as_pg:
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self.etcd_port, self.etcd_peer = free_port(), free_port()
        self.pg_ports = [free_port() for _ in range(NODES)]
        self.rest_ports = [free_port() for _ in range(NODES)]
        self.haproxy_port = free_port()
        self.patroni = [None] * NODES
        self.etcd = self.haproxy = None
        self.logs_dir = logs_dir  # where stop() copies every log (and the nemesis's events)

    def event(self, what):
        """One line in nemesis.log: monotonic (the upstream log's clock) and UTC wall time."""
        with open(os.path.join(self.root, "nemesis.log"), "a") as f:
            f.write(f"{time.monotonic():.3f} {time.strftime('%H:%M:%S', time.gmtime())} {what}\n")

    # -- plumbing ---------------------------------------------------------------------------
    def spawn(self, argv, log, as_pg=True):
        kw = {"user": "postgres", "group": "postgres", "extra_groups": []} if (
            as_pg and self.as_pg) else {}
        out = open(os.path.join(self.root, log), "ab")
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=self.root, **kw)

    def name(self, node):
        return f"node{node}"

    def yml(self, node):
        return os.path.join(self.root, f"{self.name(node)}.yml")

    def write_config(self, node):
        me, rest, pg = self.name(node), f"127.0.0.1:{self.rest_ports[node]}", \
            f"127.0.0.1:{self.pg_ports[node]}"
        sync = "true" if self.synchronous else "false"
        lag = "" if self.synchronous else "    maximum_lag_on_failover: 1073741824\n"
        text = f"""scope: chaos
name: {me}
restapi:
  listen: {rest}
  connect_address: {rest}
etcd3:
  hosts: 127.0.0.1:{self.etcd_port}
bootstrap:
  dcs:
    ttl: {TTL}
    loop_wait: {LOOP_WAIT}
    retry_timeout: {RETRY_TIMEOUT}
    primary_start_timeout: 0
    synchronous_mode: {sync}
    synchronous_mode_strict: {sync}
{lag}    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        synchronous_commit: "on"
        fsync: "off"
        full_page_writes: "off"
        wal_log_hints: "on"
        max_connections: 300
        max_wal_senders: 10
        max_replication_slots: 10
        shared_buffers: 128MB
        log_min_messages: warning
  initdb:
    - auth: trust
    - username: idemgate
postgresql:
  listen: {pg}
  connect_address: {pg}
  data_dir: {self.root}/{me}
  bin_dir: {self.bin}
  pgpass: {self.root}/{me}.pgpass
  use_pg_rewind: true
  remove_data_directory_on_rewind_failure: true
  remove_data_directory_on_diverged_timelines: true
  authentication:
    superuser: {{username: idemgate}}
    replication: {{username: idemgate}}
    rewind: {{username: idemgate}}
  parameters:
    unix_socket_directories: {self.root}
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
"""
        with open(self.yml(node), "w") as f:
            f.write(text)

    def haproxy_config(self):
        servers = "".join(f"  server {self.name(i)} 127.0.0.1:{self.pg_ports[i]} maxconn 300 "
                          f"check port {self.rest_ports[i]}\n" for i in range(NODES))
        return f"""global
  maxconn 1000
defaults
  mode tcp
  timeout connect 3s
  timeout client 30m
  timeout server 30m
  timeout check 2s
listen postgres
  bind 127.0.0.1:{self.haproxy_port}
  option httpchk OPTIONS /primary
  http-check expect status 200
  default-server inter 1s fall 2 rise 2 on-marked-down shutdown-sessions
{servers}"""

    def sql(self, node, statement, timeout=10):
        """The first column of the first row, or None when the node does not answer."""
        return self._psql(["-h", "127.0.0.1", "-p", str(self.pg_ports[node])], statement,
                          timeout)

    def _psql(self, where, statement, timeout):
        try:
            out = subprocess.run([os.path.join(self.bin, "psql")] + where +
                                 ["-U", "idemgate", "-d", "postgres", "-XAtc", statement],
                                 capture_output=True, text=True, timeout=timeout,
                                 env=dict(os.environ, PGCONNECT_TIMEOUT="2"))
        except subprocess.TimeoutExpired:
            return None
        return out.stdout.split("\n")[0] if out.returncode == 0 else None

    def wait_for(self, what, pred, timeout_s=90):
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            reap_servers()
            if pred():
                return time.monotonic() - t0
            time.sleep(0.2)  # Patroni's state: polled
        raise RuntimeError(f"Patroni: {what} not within {timeout_s} s (logs in {self.root})")

    # -- the cluster ------------------------------------------------------------------------
    def start(self):
        self.start_etcd()
        for node in range(NODES):
            self.write_config(node)
            self.start_node(node)
            if node == 0:
                self.wait_for("node0 bootstrapped", lambda: self.leader() == 0)
        with open(os.path.join(self.root, "haproxy.cfg"), "w") as f:
            f.write(self.haproxy_config())
        self.haproxy = self.spawn(["/usr/sbin/haproxy", "-db", "-f",
                                   os.path.join(self.root, "haproxy.cfg")], "haproxy.log",
                                  as_pg=False)
        self.wait_healthy()
        # HAProxy counts every server up until its checks fail: wait until it routes only to
        # the primary.
        self.wait_for("HAProxy routing to the primary", lambda: all(
            self._psql(["-h", "127.0.0.1", "-p", str(self.haproxy_port)],
                       "SELECT pg_is_in_recovery()::text", 5) == "false" for _ in range(6)))

    def start_etcd(self):
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer}"
        self.etcd = self.spawn(["/usr/bin/etcd", "--name", "etcd0", "--data-dir",
                                os.path.join(self.root, "etcd"), "--listen-client-urls", client,
                                "--advertise-client-urls", client, "--listen-peer-urls", peer,
                                "--initial-advertise-peer-urls", peer, "--initial-cluster",
                                f"etcd0={peer}", "--heartbeat-interval", "250",
                                "--election-timeout", "2500"], "etcd.log")
        self.wait_for("etcd healthy", lambda: rest_status(self.etcd_port, "GET", "/health") == 200,
                      30)

    def restart_etcd(self):
        """etcd SIGKILLed and started again on its data; returns seconds until healthy."""
        t0 = time.monotonic()
        self.etcd.kill()
        self.etcd.wait()
        self.start_etcd()
        return time.monotonic() - t0

    def start_node(self, node):
        if self.patroni[node] is not None and self.patroni[node].poll() is None:
            return
        self.patroni[node] = self.spawn(["/usr/bin/patroni", self.yml(node)],
                                        f"{self.name(node)}.log")

    def postmaster(self, node):
        try:
            with open(os.path.join(self.root, self.name(node), "postmaster.pid")) as f:
                pid = int(f.readline())
            return pid if alive(pid) else 0
        except (OSError, ValueError):
            return 0

    def leader(self):
        for node in range(NODES):
            if rest_status(self.rest_ports[node], "OPTIONS", "/primary") == 200:
                return node
        return None

    def sync_standby(self):
        for node in range(NODES):
            if rest_status(self.rest_ports[node], "GET", "/sync") == 200:
                return node
        return None

    def healthy(self):
        leader = self.leader()
        if leader is None:
            return False
        state = self.sql(leader, "SELECT count(*) FILTER (WHERE state = 'streaming') || ' ' || "
                         "count(*) FILTER (WHERE state = 'streaming' AND sync_state = 'sync') "
                         "FROM pg_stat_replication", 5)
        want = f"{NODES - 1} {1 if self.synchronous else 0}"
        return state == want and (not self.synchronous or self.sync_standby() is not None)

    def wait_healthy(self, timeout_s=120):
        for node in range(NODES):
            self.start_node(node)
        return self.wait_for("the cluster healthy (leader, sync standby, replica)",
                             self.healthy, timeout_s)

    # -- faults (the nemesis's) -------------------------------------------------------------
    def kill_postgres(self, node):
        pm = self.postmaster(node)
        if not pm:
            return
        kids = children_of(pm)
        for pid in [pm] + kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.wait_for("the killed postmaster gone", lambda: not alive(pm) and not any(
            alive(k) for k in kids), 10)

    def kill_patroni(self, node):
        p = self.patroni[node]
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()

    def kill_node(self, node):
        pm = self.postmaster(node)
        self.kill_patroni(node)
        if pm:
            self.kill_postgres(node)

    def signal_node(self, node, sig):
        """SIGSTOP or SIGCONT to the node's Patroni and every PostgreSQL process."""
        pm = self.postmaster(node)
        pids = ([self.patroni[node].pid] if self.patroni[node] else []) + (
            [pm] + children_of(pm) if pm else [])
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def walreceiver(self, node):
        v = self.sql(node, "SELECT pid FROM pg_stat_wal_receiver", 5)
        return int(v) if v and v.isdigit() else 0

    def switchover(self, candidate):
        leader = self.leader()
        if leader is None:
            raise RuntimeError("no leader to switch over from")
        argv = ["/usr/bin/patronictl", "-c", self.yml(0), "switchover", "--force", "--leader",
                self.name(leader), "--candidate", self.name(candidate)]
        if self.as_pg:
            argv = ["runuser", "-u", "postgres", "--"] + argv
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"patronictl switchover failed: {out.stdout}{out.stderr}")

    def dsn(self):
        """Every node; libpq follows whichever is the primary (connect_timeout: see pg.py)."""
        return ("host=" + ",".join(["127.0.0.1"] * NODES) + " port=" +
                ",".join(str(p) for p in self.pg_ports) +
                " user=idemgate dbname=postgres target_session_attrs=read-write "
                "connect_timeout=10")

    def haproxy_dsn(self):
        return (f"host=127.0.0.1 port={self.haproxy_port} user=idemgate dbname=postgres "
                "connect_timeout=10")

    def dsns(self):
        """Gateway 0 finds the primary by libpq multi-host, gateway 1 through HAProxy."""
        return [self.dsn(), self.haproxy_dsn()]

    def stop(self):
        for node in range(NODES):
            self.signal_node(node, signal.SIGCONT)
            self.kill_node(node)
        for p in (self.etcd, self.haproxy):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        reap_servers()
        if self.logs_dir:
            os.makedirs(self.logs_dir, exist_ok=True)
            for name in os.listdir(self.root):
                if name.endswith(".log"):
                    shutil.copy(os.path.join(self.root, name), self.logs_dir)
        shutil.rmtree(self.root, ignore_errors=True)
