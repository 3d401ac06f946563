# SPDX-License-Identifier: Apache-2.0
"""The nemesis: at random moments kills and restarts the gateway on the same store, pauses it
shorter and longer than the lease, fails and stalls the store's disk, steps the wall clock, and
fills the disk. It marks the keys in flight when a fault hits them."""
import os
import random
import subprocess
import time

from .gateway import LEASE_S, Idemgate

# After a database restart or failover, the gateways' connections (and a fencing backend's) are
# made again: a request that begins within a lease of it may still find its completion failing.
DB_SETTLE_S = LEASE_S


class DiskFull:
    """A small file system under the store, filled and emptied on demand (needs root to mount):
    ext4 on a loop device, as a production store's disk would be (the WAL's prewrite runs on it),
    or a tmpfs where loop devices are not available."""

    def __init__(self, store_dir, size_mb=64):
        self.store_dir = store_dir
        self.image = store_dir.rstrip("/") + ".img"
        self.kind = "ext4"
        for cmd in (["truncate", "-s", f"{size_mb}M", self.image],
                    ["mkfs.ext4", "-q", "-F", self.image],
                    ["mount", "-o", "loop", self.image, store_dir]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                break
        if r.returncode != 0:
            self.kind = "tmpfs"
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs",
                                store_dir], capture_output=True, text=True)
        self.ok = r.returncode == 0
        self.why = r.stderr.strip()
        self.filler = os.path.join(store_dir, "chaos-filler")
        if self.ok and self.kind == "ext4":
            # A fresh ext4 holds lost+found; the gateway's store wants the directory to itself.
            subprocess.run(["rmdir", os.path.join(store_dir, "lost+found")], capture_output=True)

    def fill(self):
        """Writes a filler file until the file system is full (ENOSPC)."""
        try:
            fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError:
            return
        try:
            for size in (1 << 20, 4096, 1):
                chunk = b"\0" * size
                try:
                    while os.write(fd, chunk) > 0:
                        pass
                except OSError:
                    pass
        finally:
            os.close(fd)

    def empty(self):
        try:
            os.unlink(self.filler)
        except OSError:
            pass

    def unmount(self):
        if self.ok:
            subprocess.run(["umount", "-l", self.store_dir], capture_output=True)
        try:
            os.unlink(self.image)
        except OSError:
            pass


class Nemesis:
    """Faults on the gateways `gws` (one on RocksDB; several on PostgreSQL) and, with a
    PostgreSQL `cluster`, on the database: restarts, and failovers (primary killed, standby
    promoted; with `freeze` the standby's WAL receiver frozen first, always when `freeze` is
    "always": the planted asynchronous standby then loses what it had not received)."""

    def __init__(self, gws, rec, rng, stats, disk_full, violations, comeback_s=30, cluster=None,
                 freeze="sometimes"):
        self.gws, self.rec, self.rng, self.stats = gws, rec, rng, stats
        self.disk_full = disk_full
        self.violations = violations
        self.comeback_s = comeback_s
        self.cluster = cluster
        self.freeze = freeze

    def actions(self):
        acts = [self.kill, self.kill, self.short_pause, self.long_pause]
        shim = all(isinstance(gw, Idemgate) and gw.shim for gw in self.gws)
        if shim and self.cluster is None:  # on PostgreSQL the gateway syncs nothing
            acts += [self.disk_fail, self.disk_stall, self.disk_stall_long]
        if shim:
            acts.append(self.clock_step)
        if self.disk_full is not None and self.disk_full.ok:
            acts.append(self.fill_disk)
        if self.cluster is not None:
            acts += [self.db_restart, self.failover]
        return acts

    def run(self, stop):
        acts = self.actions()
        first = True
        while not stop.wait(self.rng.uniform(1.0, 4.0)):
            self.check_alive()
            act = (self.failover if self.cluster else self.kill) if first else self.rng.choice(acts)
            first = False
            try:
                act()
            except Exception as e:  # a harness error is reported, never a silent stop
                self.violations.append(("harness", f"nemesis {act.__name__}: {e!r}"))
        self.check_alive()

    def bump(self, name, n=1):
        self.stats[name] = self.stats.get(name, 0) + n

    def restart(self, gw, why):
        for _ in range(3):
            took = gw.start(self.comeback_s)
            if took is not None:
                self.stats.setdefault("recovery_s", []).append(took)
                return
            how = (f"exited during start-up (status {gw.proc.returncode})"
                   if gw.proc.poll() is not None else
                   f"not answering within {self.comeback_s} s")
            self.violations.append(("comes back", f"gateway {how} after a restart ({why}); "
                                    f"see {gw.log_path}"))
            gw.kill()

    def check_alive(self):
        for gw in self.gws:
            if gw.died_on_its_own():
                self.bump("unexpected exits")
                self.rec.mark_inflight("crash")
                self.violations.append(("comes back", f"gateway exited on its own "
                                        f"(status {gw.proc.returncode}); see {gw.log_path}"))
                gw.expected_exit = True
                self.restart(gw, "after its own exit")

    def kill(self):
        gw = self.rng.choice(self.gws)
        self.rec.mark_inflight("kill")
        gw.kill()
        self.bump("kills")
        self.restart(gw, "SIGKILL")

    def _pause(self, seconds, reason):
        gw = self.rng.choice(self.gws)
        # Only what is in flight: a request sent meanwhile waits in the paused one's backlog (or
        # goes to the other gateway) and runs normally after.
        self.rec.mark_inflight(reason) if reason else None
        gw.pause()
        time.sleep(seconds)
        if reason:
            self.rec.mark_inflight(reason)
        gw.resume()

    def short_pause(self):
        self.bump("pauses < lease")
        self._pause(self.rng.uniform(0.2, LEASE_S / 2), None)

    def long_pause(self):
        self.bump("pauses > lease")
        self._pause(LEASE_S + self.rng.uniform(0.5, 2.0), "pause>lease")

    def _window(self, reason, seconds, **faults):
        gw = self.gws[0]  # disk faults: RocksDB, one gateway
        self.rec.fault_begins(reason)
        gw.faults.set(**faults)
        time.sleep(seconds)
        self.rec.mark_inflight(reason)
        gw.faults.set(sync_fail=0, sync_stall_ms=0, sync_stall_count=-1)
        time.sleep(0.3)
        self.rec.fault_ends(reason)

    def disk_fail(self):
        self.bump("disk faults")
        self._window("disk fault", self.rng.uniform(0.2, 1.5), sync_fail=self.rng.choice([1, 3, -1]))

    def disk_stall(self):
        self.bump("disk stalls < lease")
        self._window("disk stall", 1.0, sync_stall_ms=self.rng.randint(100, 800),
                     sync_stall_count=self.rng.randint(1, 5))

    def disk_stall_long(self):
        self.bump("disk stalls > lease")
        self._window("disk stall", LEASE_S + 1.0, sync_stall_ms=(LEASE_S + 1) * 1000,
                     sync_stall_count=1)

    def clock_step(self):
        self.bump("clock steps")
        self.rec.mark_inflight("clock step")  # not an excuse for a second execution
        gw = self.rng.choice(self.gws)
        offset = self.rng.choice([-1, 1]) * self.rng.randint(5, 900)
        step = offset - gw.faults.values.get("clock_offset_s", 0)
        self.rec.mark_calls(f"clock step {'back' if step < 0 else 'forward'} (in a call)")
        gw.faults.set(clock_offset_s=offset)

    def fill_disk(self):
        self.bump("disk full")
        self.rec.fault_begins("disk full")
        self.disk_full.fill()
        time.sleep(self.rng.uniform(0.5, 2.0))
        self.rec.mark_inflight("disk full")
        self.disk_full.empty()
        time.sleep(0.3)
        self.rec.fault_ends("disk full")

    def db_restart(self):
        """The primary restarted (crash or fast shutdown), or the synchronous standby (the
        primary's commits wait for it meanwhile)."""
        node, crash = self.rng.choice([(self.cluster.primary, True), (self.cluster.primary, False),
                                       (self.cluster.standby, self.rng.random() < 0.5)])
        self.bump("db restarts")
        self.rec.fault_begins("db restart")
        t0 = time.monotonic()
        self.cluster.restart(node, crash)
        self.stats.setdefault("db restart s", []).append(time.monotonic() - t0)
        self.rec.fault_ends("db restart", settle_s=DB_SETTLE_S)

    def failover(self):
        freeze = self.freeze == "always" or self.rng.random() < 0.5
        self.bump("failovers")
        if freeze:
            self.bump("failovers after a frozen WAL receiver")
        self.rec.fault_begins("failover")
        promoted, took = self.cluster.failover(
            freeze_s=self.rng.uniform(0.5, 1.5) if freeze else 0.0,
            on_killed=lambda: self.rec.mark_inflight("failover"))
        self.rec.fault_ends("failover", settle_s=DB_SETTLE_S)
        self.stats.setdefault("promote s", []).append(promoted)
        self.stats.setdefault("failover s", []).append(took)
