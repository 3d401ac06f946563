# SPDX-License-Identifier: Apache-2.0
"""One campaign: upstream, gateway, clients and nemesis for N minutes, then a clean restart, a
replay of every key that got a final answer, the checks and the summary table."""
import json
import os
import random
import shutil
import tempfile
import threading
import time

from . import checks, trace
from .clients import Record, call, client_loop
from .gateway import RESPONSE_TIMEOUT_S, Idemgate, PlantedProxy
from .nemesis import DiskFull, Nemesis
from .pg import PgCluster
from .upstream import Upstream
from .fencing_upstream import FencingUpstream

# The kinds of campaign: the real idemgate on RocksDB or (two instances) on PostgreSQL, and the
# planted faulty gateways of --self-test.
PG_KINDS = {"idemgate-pg", "planted-pg-async"}
# --backend patroni: two idemgates on a Patroni-managed cluster (chaos_lib/patroni.py); the
# planted one runs Patroni with synchronous_mode off.
PATRONI_KINDS = {"idemgate-patroni", "planted-patroni-async"}


def make_cluster(kind, workdir):
    if kind in PATRONI_KINDS:
        from .patroni import PatroniCluster
        return PatroniCluster(synchronous=(kind != "planted-patroni-async"),
                              logs_dir=os.path.join(workdir, "patroni"))
    return PgCluster(synchronous=(kind != "planted-pg-async"))


def make_gateways(kind, opts, workdir, upstream_port, store_dir, cluster):
    if kind == "planted-proxy":
        return [PlantedProxy(workdir, upstream_port, opts.script)]
    if cluster is not None:  # two instances on one database (each its own way to the primary)
        dsns = cluster.dsns() if hasattr(cluster, "dsns") else [cluster.dsn()] * 2
        return [Idemgate(workdir, upstream_port, opts.gateway, opts.shim, opts.takeover,
                         f"{store_dir}{i}", tag=str(i), pg_dsn=dsns[i],
                         encrypted=getattr(opts, "encryption", False)) for i in (0, 1)]
    return [Idemgate(workdir, upstream_port, opts.gateway, opts.shim, opts.takeover, store_dir,
                     wipe_on_kill=(kind == "planted-wiped-store"),
                     encrypted=getattr(opts, "encryption", False))]


def start_all(gws, violations, why):
    """Starts every gateway; the seconds the slowest took, or None (a violation) if one did
    not come back."""
    took = []
    for gw in gws:
        t = gw.start(30)
        if t is None:
            violations.append(("comes back", f"{gw.log_path}: no answer {why}"))
            return None
        took.append(t)
    return max(took)


def replay_all(rec, ports, seed, threads=8):
    """Replays every key that got a final answer (its first body), from `threads` clients."""
    keys, out, lock = list(rec.finals), {}, threading.Lock()

    def worker(i):
        rng = random.Random(seed * 7 + i)
        for key in keys[i::threads]:
            ans = call(rec, ports, key, rec.body[key], None, rng, give_up_s=15)
            if ans is not None:
                with lock:
                    out[key] = ans

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def drive(gws, rec, rng, stats, disk_full, violations, opts, seed, minutes, cluster, kind):
    """Clients and the nemesis for `minutes`; then faults off and every client's call settled."""
    extra = {}
    nemesis_class = Nemesis
    if kind in PATRONI_KINDS:
        from .patroni_nemesis import PatroniNemesis as nemesis_class
        extra["pause_leader"] = getattr(opts, "pause_leader", None)
    nemesis = nemesis_class(gws, rec, rng, stats, disk_full, violations, cluster=cluster,
                            freeze="always" if kind.startswith("planted-") else "sometimes",
                            **extra)
    stop_clients, stop_nemesis = threading.Event(), threading.Event()
    ports = [gw.port for gw in gws]
    clients = [threading.Thread(target=client_loop, args=(rec, ports, i, seed, stop_clients),
                                daemon=True) for i in range(opts.clients)]
    for t in clients:
        t.start()
    nt = threading.Thread(target=nemesis.run, args=(stop_nemesis,), daemon=True)
    nt.start()
    time.sleep(minutes * 60)
    stop_nemesis.set()
    nt.join()
    for gw in gws:
        if isinstance(gw, Idemgate):
            # The clock stays where the last step left it: a reset would step it back.
            gw.faults.set(sync_fail=0, sync_stall_ms=0)
    stop_clients.set()
    for t in clients:
        t.join(90)


def dump(workdir, rec, execs, replays, attempts):
    """Every answer and every upstream execution, as JSON lines, for the evidence."""
    def ans(a):
        return {"status": a[0], "headers": a[1], "body": a[2].decode(errors="replace")}

    with open(os.path.join(workdir, "answers.jsonl"), "w") as f:
        for key, answers in rec.finals.items():
            f.write(json.dumps({"key": key, "body": rec.body[key], "finals": [ans(a) for a in answers],
                                "replay": ans(replays[key]) if key in replays else None,
                                "hit_by": sorted(rec.hits.get(key, ()))}) + "\n")
        for key, a in rec.diff:
            f.write(json.dumps({"key": key, "different_body": True, "answer": ans(a)}) + "\n")
    with open(os.path.join(workdir, "executions.jsonl"), "w") as f:
        for key, eid, body, t in execs:
            attempt, request_id = attempts.get(eid, (None, None))
            f.write(json.dumps({"key": key, "exec": eid, "attempt": attempt,
                                "request_id": request_id, "body": body, "t": t}) + "\n")


def run(opts, kind="idemgate", seed=None, minutes=None, quiet=False):
    seed = opts.seed if seed is None else seed
    minutes = opts.minutes if minutes is None else minutes
    rng = random.Random(seed)
    workdir = tempfile.mkdtemp(prefix=f"chaos-{kind}-")
    store_dir = os.path.join(workdir, "store")
    os.makedirs(store_dir)
    fencing = getattr(opts, "fencing_upstream", None) if kind in PG_KINDS else None
    if fencing:  # docs/fencing.md: executions are rows in the gateways' database
        upstream = FencingUpstream(seed, RESPONSE_TIMEOUT_S + 0.5, fence=(fencing == "fence"))
    else:
        upstream = Upstream(seed, slow_s=RESPONSE_TIMEOUT_S + 0.5)
    disk_full, cluster = None, None
    if kind in PG_KINDS | PATRONI_KINDS:
        cluster = make_cluster(kind, workdir)
    elif kind != "planted-proxy" and not opts.no_disk_full:
        disk_full = DiskFull(store_dir)
        if not disk_full.ok:
            print(f"note: disk-full fault skipped (cannot mount a file system: {disk_full.why})")
        else:
            print(f"note: the store is on its own {disk_full.kind}, filled and emptied")
    gws = make_gateways(kind, opts, workdir, upstream.port, store_dir, cluster)
    rec, stats, violations, replays, twice = Record(), {}, [], {}, {}
    t_start = time.monotonic()
    try:
        if cluster is not None:
            cluster.start()
            if fencing:
                upstream.start(cluster.dsn())
        if start_all(gws, [], "at the start") is None:
            raise SystemExit(f"the gateway did not start; see {workdir}/gateway*.log")
        stats["recovery_s"] = []
        drive(gws, rec, rng, stats, disk_full, violations, opts, seed, minutes, cluster, kind)
        # The clean restart: SIGTERM, start on the same store, replay every key with an answer.
        for gw in gws:
            gw.stop()
        took = start_all(gws, violations, "after the clean restart")
        if took is not None:
            stats["clean restart s"] = took
            replays = replay_all(rec, [gw.port for gw in gws], seed)
        # With a fencing backend no second execution is excused: zero, not "explained".
        execs, attempts = upstream.log.snapshot(), upstream.log.attempts()
        twice, unrec = checks.check(rec, execs, replays, opts.takeover and fencing != "fence",
                                    violations, attempts)
        stats["not recorded"] = unrec
    finally:
        for gw in gws:
            gw.stop()
        upstream.stop()
        if disk_full is not None:
            disk_full.unmount()
        if cluster is not None:
            cluster.stop()
    stats["elapsed_s"] = time.monotonic() - t_start
    summary = summarize(kind, seed, minutes, opts, rec, upstream, stats, twice, violations)
    if not quiet or violations:
        print(summary)
    if (quiet or not violations) and not opts.keep:  # quiet: a self-test's planted run
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        dump(workdir, rec, execs, replays, attempts)
        for key in sorted({ev.split(":")[0] for inv, ev in violations
                           if inv == "at most one execution"}):
            print("\n".join(trace.explain(workdir, key, execs, attempts)))
        print(f"(answers.jsonl, executions.jsonl, access*.log and gateway*.log kept in {workdir})")
    return violations, stats


def summarize(kind, seed, minutes, opts, rec, upstream, stats, twice, violations):
    execs = upstream.log.snapshot()
    rows = [
        ("gateway", kind + ("" if kind not in ("idemgate", "idemgate-pg", "idemgate-patroni") else
                            f" (takeover = {'true' if opts.takeover else 'false'})")),
        ("seed / minutes", f"{seed} / {minutes}"),
        ("requests sent (incl. retries)", rec.requests),
        ("keys", len(rec.body)),
        ("keys with a final answer", len(rec.finals)),
        ("keys given up (no final answer in 40 s)", len(rec.gave_up)),
        ("different-body reuses (expect 422)", len(rec.diff)),
        ("upstream executions", len(execs)),
        ("answers by status", ", ".join(f"{k}:{v}" for k, v in
                                        sorted(rec.statuses.items(), key=str))),
    ]
    names = ["kills", "pauses < lease", "pauses > lease", "disk faults", "disk stalls < lease",
             "disk stalls > lease", "disk full", "clock steps", "unexpected exits"]
    if kind in PG_KINDS:
        names = ["kills", "pauses < lease", "pauses > lease", "clock steps", "db restarts",
                 "failovers", "failovers after a frozen WAL receiver", "unexpected exits"]
    timings = []
    if kind in PATRONI_KINDS:
        from .patroni_nemesis import FAULT_NAMES, TIMINGS
        names, timings = FAULT_NAMES, TIMINGS
    for name in names:
        rows.append((name, stats.get(name, 0)))
    for name, label in timings + [("recovery_s", "back after restart (s)"),
                        ("db restart s", "database restart (s)"),
                        ("promote s", "failover: kill to promoted (s)"),
                        ("failover s", "failover: kill to new sync standby (s)")]:
        xs = stats.get(name, [])
        if xs:
            rows.append((label + ": max / mean",
                         f"{max(xs):.2f} / {sum(xs) / len(xs):.2f} over {len(xs)}"))
    rows.append(("clean restart (s)", f"{stats.get('clean restart s', float('nan')):.2f}"))
    rows.append(("502 'could not be recorded' (in flight at)", ", ".join(
        f"{k}: {v}" for k, v in sorted(stats.get("not recorded", {}).items())) or "0"))
    rows.append(("keys executed twice, and why", ", ".join(f"{k}: {v}" for k, v in
                                                           sorted(twice.items())) or "0"))
    if getattr(upstream, "fence", None) is not None:
        rows += fencing_rows(rec, upstream)
    rows.append(("violations", len(violations)))
    w = max(len(r[0]) for r in rows)
    lines = [f"  {name:<{w}}  {val}" for name, val in rows]
    for key, why in list(rec.gave_up_why.items())[:5]:
        hit = sorted(rec.hits.get(key, ())) or "no fault"
        lines.append(f"  gave up on {key} (in flight at: {hit}): {why}")
    by_inv = {}
    for inv, ev in violations:
        by_inv.setdefault(inv, []).append(ev)
    for inv in checks.INVARIANTS + ["harness"]:
        if inv in by_inv:
            lines.append(f"  VIOLATION {inv}: {len(by_inv[inv])}, e.g.")
            lines += [f"    {e}" for e in by_inv[inv][:3]]
    return "\n".join(lines)


def fencing_rows(rec, upstream):
    """What fencing did (docs/fencing.md): the stored 502s for attempts that executed with their
    answer lost, and the stale attempts the fence refused."""
    lost = sum(1 for answers in rec.finals.values()
               if any(a[0] == 502 and b"its answer was lost" in a[2] for a in answers))
    return [("upstream", "fencing (idemgate_fence in the backend's transaction)" if upstream.fence
             else "control: the same backend without the fence"),
            ("keys answered 502 'executed, answer lost'", lost),
            ("attempts refused by the fence (rolled back)", upstream.log.fenced if upstream.log
             else 0)]
