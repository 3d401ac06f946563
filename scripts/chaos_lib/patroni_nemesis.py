# SPDX-License-Identifier: Apache-2.0
"""The nemesis of --backend patroni: the gateway faults of the other campaigns (kill, pauses,
clock steps) and faults on the Patroni-managed nodes: the leader or a standby killed (PostgreSQL
and Patroni, or either alone), paused shorter and longer than Patroni's ttl, etcd restarted, a
planned switchover. It never promotes anything: Patroni decides. After each fault on a node it
restarts what it killed and waits until Patroni has the cluster whole again. After a fault on the
leader it times the outage: from the fault to the first 201 through each gateway (its own probe
keys, recorded and checked like every client's)."""
import json
import os
import signal
import subprocess
import threading
import time

from .clients import send
from .nemesis import Nemesis
from .patroni import TTL

# Faults on the leader are failovers (the checks' excuse "failover"); on a standby or etcd,
# commits wait for it ("db restart").
FAULT_NAMES = ["kills", "pauses < lease", "pauses > lease", "clock steps", "leader killed",
               "leader's PostgreSQL killed", "leader's Patroni killed", "leader paused > ttl",
               "standby killed", "standby paused", "etcd restarts", "switchovers",
               "failovers after frozen WAL receivers", "unexpected exits"]
TIMINGS = [("failover dsn s", "leader fault -> first 201, multi-host DSN (s)"),
           ("failover haproxy s", "leader fault -> first 201, HAProxy (s)"),
           ("healthy s", "fault -> cluster whole again (s)"),
           ("switchover dsn s", "switchover -> first 201, multi-host DSN (s)"),
           ("switchover haproxy s", "switchover -> first 201, HAProxy (s)"),
           ("etcd s", "etcd restart -> first 201 (s)")]


class PatroniNemesis(Nemesis):
    def __init__(self, *args, pause_leader=None, **kw):
        super().__init__(*args, **kw)
        self.probes = 0
        # Pausing the leader past its ttl loses acknowledged commits with Patroni < 3.0.3 (its
        # etcd3 leader-key bug, not ours): off there unless asked for (--pause-leader).
        self.pause_leader_on = patroni_has_leader_key_fix() if pause_leader is None else \
            pause_leader

    def actions(self):
        acts = [self.kill, self.short_pause, self.long_pause]
        if all(gw.shim for gw in self.gws):
            acts.append(self.clock_step)
        acts += [self.kill_leader, self.kill_leader, self.kill_leader_postgres,
                 self.kill_leader_patroni, self.kill_standby, self.pause_standby,
                 self.restart_etcd, self.switchover]
        if self.pause_leader_on:
            acts.append(self.pause_leader)
        return acts

    def run(self, stop):
        # The first fault is always a failover (the campaign's point), then random ones.
        acts, first = self.actions(), True
        if not self.pause_leader_on:
            print("note: Patroni %s: no leader pauses past the ttl (before 3.0.3 they lose "
                  "acknowledged commits; --pause-leader runs them)" %
                  ".".join(map(str, patroni_version())), flush=True)
        while not stop.wait(self.rng.uniform(1.0, 4.0)):
            self.check_alive()
            act = self.kill_leader if first else self.rng.choice(acts)
            first = False
            # A fault on the cluster lasts seconds: every key sent while it lasts is exposed
            # to it, not only those in flight when it began.
            reason = {"kill_standby": "db restart", "pause_standby": "db restart",
                      "restart_etcd": "db restart"}.get(act.__name__, "failover")
            marking = self.marking(reason) if act.__name__ not in (
                "kill", "short_pause", "long_pause", "clock_step") else None
            try:
                self.cluster.event(f"{act.__name__} begins (leader {self.cluster.leader()}, "
                                   f"sync {self.cluster.sync_standby()})")
                act()
                self.cluster.event(f"{act.__name__} done")
            except Exception as e:  # a harness error is reported, never a silent stop
                self.violations.append(("harness", f"nemesis {act.__name__}: {e!r}"))
                self.heal()
            finally:
                if marking is not None:
                    marking.set()
        self.check_alive()

    # -- timing: probes through each gateway ------------------------------------------------
    def probe_until_201(self, gw, t0, timeout_s=120):
        """POSTs fresh keys through `gw` until one gets 201; seconds since t0, or None."""
        while time.monotonic() - t0 < timeout_s:
            self.probes += 1
            key = f"probe-{gw.tag}-{self.probes}"
            body = json.dumps({"amount": 1, "probe": self.probes})
            with self.rec.lock:
                self.rec.body[key] = body
            self.rec.begin(key)
            status, ans = "conn", None
            try:
                ans = send(gw.port, key, body, timeout=10)
                status = ans[0]
            except OSError:
                pass
            finally:
                self.rec.end(key, status)
            if ans is not None and status not in (409, 503) and not (
                    status == 502 and b"upstream_unavailable" in ans[2]):
                with self.rec.lock:
                    self.rec.finals.setdefault(key, []).append(ans)
                if status == 201:
                    return time.monotonic() - t0
            time.sleep(0.1)
        return None

    def time_outage(self, t0, prefix):
        """The first 201 through each gateway after t0, probed in parallel."""
        out = {}

        def one(i, gw):
            out[i] = self.probe_until_201(gw, t0)

        ts = [threading.Thread(target=one, args=(i, gw)) for i, gw in enumerate(self.gws)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for i, label in enumerate(["dsn", "haproxy"][:len(self.gws)]):
            if out.get(i) is None:
                self.violations.append(("comes back", f"no 201 through gateway {i} ({label}) "
                                        f"within 120 s of a {prefix}"))
            else:
                self.stats.setdefault(f"{prefix} {label} s", []).append(out[i])

    def marking(self, reason):
        """Marks the keys in flight every 0.2 s until the returned event is set: a fault on the
        cluster lasts seconds, and a key sent after its start is as exposed to it."""
        done = threading.Event()

        def loop():
            while not done.wait(0.2):
                self.rec.mark_inflight(reason)

        threading.Thread(target=loop, daemon=True).start()
        return done

    def heal(self, t0=None):
        """Every node resumed and started, then waits until the cluster is whole."""
        c = self.cluster
        for node in range(3):
            c.signal_node(node, signal.SIGCONT)
        took = c.wait_healthy()
        if t0 is not None:
            self.stats.setdefault("healthy s", []).append(time.monotonic() - t0)
        return took

    def leader(self):
        leader = self.cluster.leader()
        if leader is None:
            raise RuntimeError("no leader before a fault")
        return leader

    def wait_new_leader(self, old, t0):
        self.cluster.wait_for("a new leader", lambda: self.cluster.leader() not in (None, old))
        self.stats.setdefault("promote s", []).append(time.monotonic() - t0)

    # -- faults on the nodes ----------------------------------------------------------------
    def freeze_receivers(self):
        """Sometimes (always in the planted run) the standbys' WAL receivers are frozen for
        0.5-1.5 s before the leader dies: with synchronous replication the leader then waits
        (nothing acknowledged); without it acknowledges what no standby has."""
        if not (self.freeze == "always" or self.rng.random() < 0.3):
            return []
        pids = [p for p in (self.cluster.walreceiver(n) for n in range(3)) if p]
        for pid in pids:
            signal_quietly(pid, signal.SIGSTOP)
        if pids:
            self.bump("failovers after frozen WAL receivers")
            time.sleep(self.rng.uniform(0.5, 1.5))
        return pids

    def kill_leader(self, what="node"):
        """The leader's PostgreSQL and Patroni (node), or PostgreSQL alone, SIGKILLed."""
        c, old = self.cluster, self.leader()
        frozen = self.freeze_receivers()
        self.rec.mark_inflight("failover")
        if what == "node":
            c.kill_node(old)
        else:
            c.kill_postgres(old)
        t0 = time.monotonic()
        for pid in frozen:  # what the frozen receivers had not read dies with them
            signal_quietly(pid, signal.SIGKILL)
        self.rec.mark_inflight("failover")
        self.bump("leader killed" if what == "node" else "leader's PostgreSQL killed")
        self.wait_new_leader(old, t0)
        self.time_outage(t0, "failover")
        self.heal(t0)
        self.rec.mark_inflight("failover")

    def kill_leader_postgres(self):
        self.kill_leader(what="postgres")

    def kill_leader_patroni(self):
        """Patroni alone dies: its PostgreSQL runs on, unmanaged, until the leader key expires
        and a standby is promoted; restarted, Patroni demotes and rewinds it."""
        c, old = self.cluster, self.leader()
        self.bump("leader's Patroni killed")
        self.rec.mark_inflight("failover")
        c.kill_patroni(old)
        t0 = time.monotonic()
        self.wait_new_leader(old, t0)
        # Patroni comes back (and demotes its PostgreSQL) while the outage is being timed: until
        # then the unmanaged old primary still takes connections, and through the multi-host
        # DSN its commits wait for a synchronous standby that now follows the new leader.
        later = threading.Timer(self.rng.uniform(0, 10), lambda: (
            c.event(f"node{old}'s Patroni restarted"), c.start_node(old)))
        later.start()
        self.time_outage(t0, "failover")
        later.join()
        self.rec.mark_inflight("failover")
        self.heal(t0)
        self.rec.mark_inflight("failover")

    def pause_leader(self):
        """SIGSTOP past the ttl (a stalled machine): the others promote; resumed 0-5 s later,
        the old leader must demote itself. Patroni before 3.0.3 instead may overwrite the new
        leader's key on resume and take the leadership back, and the node it had promoted is
        rewound: what it acknowledged is lost (patroni_has_leader_key_fix)."""
        c, old = self.cluster, self.leader()
        self.bump("leader paused > ttl")
        self.rec.mark_inflight("failover")
        c.signal_node(old, signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            self.wait_new_leader(old, t0)
        except Exception:
            c.signal_node(old, signal.SIGCONT)
            raise
        # Resumed while the outage is being timed: until then a gateway on the multi-host DSN
        # waits on the frozen node (TCP keepalives are answered by its kernel).
        later = threading.Timer(self.rng.uniform(0, 5), lambda: (
            c.event(f"node{old} resumed"), c.signal_node(old, signal.SIGCONT)))
        later.start()
        self.time_outage(t0, "failover")
        later.join()
        self.rec.mark_inflight("failover")
        self.heal(t0)
        self.rec.mark_inflight("failover")

    def kill_standby(self):
        c, leader = self.cluster, self.leader()
        node = self.rng.choice([n for n in range(3) if n != leader])
        self.bump("standby killed")
        self.rec.mark_inflight("db restart")
        (c.kill_node if self.rng.random() < 0.7 else c.kill_postgres)(node)
        t0 = time.monotonic()
        time.sleep(self.rng.uniform(0.5, 5.0))
        self.rec.mark_inflight("db restart")
        c.start_node(node)
        self.heal(t0)
        self.rec.mark_inflight("db restart")

    def pause_standby(self):
        c, leader = self.cluster, self.leader()
        node = self.rng.choice([n for n in range(3) if n != leader])
        self.bump("standby paused")
        self.rec.mark_inflight("db restart")
        c.signal_node(node, signal.SIGSTOP)
        time.sleep(self.rng.uniform(0.5, TTL + 3))
        self.rec.mark_inflight("db restart")
        c.signal_node(node, signal.SIGCONT)
        self.heal(time.monotonic())
        self.rec.mark_inflight("db restart")

    def restart_etcd(self):
        self.bump("etcd restarts")
        self.rec.mark_inflight("db restart")
        t0 = time.monotonic()
        self.cluster.restart_etcd()
        self.rec.mark_inflight("db restart")
        self.heal(t0)
        took = self.probe_until_201(self.gws[0], t0)
        if took is not None:
            self.stats.setdefault("etcd s", []).append(took)
        self.rec.mark_inflight("db restart")

    def switchover(self):
        c = self.cluster
        target = c.sync_standby() if c.synchronous else None
        if target is None:
            target = self.rng.choice([n for n in range(3) if n != self.leader()])
        self.bump("switchovers")
        self.rec.mark_inflight("failover")
        t0 = time.monotonic()
        c.switchover(target)
        self.rec.mark_inflight("failover")
        self.time_outage(t0, "switchover")
        self.heal(t0)
        self.rec.mark_inflight("failover")


def signal_quietly(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def patroni_version():
    out = subprocess.run(["/usr/bin/patroni", "--version"], capture_output=True, text=True)
    try:
        return tuple(int(x) for x in out.stdout.split()[-1].split("."))
    except (ValueError, IndexError):
        return (0,)


def patroni_has_leader_key_fix():
    """Patroni 3.0.3 (its pull request 2689) stopped a leader whose etcd lease had expired (a
    stalled process) from overwriting the leader key another node had taken meanwhile."""
    return patroni_version() >= (3, 0, 3)
