"""One campaign: upstream, gateway, clients and nemesis for N minutes, then a clean restart, a
replay of every key that got a final answer, the checks and the summary table."""
import json
import os
import random
import shutil
import tempfile
import threading
import time

from . import checks
from .clients import Record, call, client_loop
from .gateway import LEASE_S, RESPONSE_TIMEOUT_S, Idemgate, PlantedProxy
from .nemesis import DiskFull, Nemesis
from .upstream import Upstream


def make_gateway(kind, opts, workdir, upstream_port, store_dir):
    if kind == "planted-proxy":
        return PlantedProxy(workdir, upstream_port, opts.script)
    return Idemgate(workdir, upstream_port, opts.gateway, opts.shim, opts.takeover, store_dir,
                    wipe_on_kill=(kind == "planted-wiped-store"))


def replay_all(rec, port, seed, threads=8):
    """Replays every key that got a final answer (its first body), from `threads` clients."""
    keys, out, lock = list(rec.finals), {}, threading.Lock()

    def worker(i):
        rng = random.Random(seed * 7 + i)
        for key in keys[i::threads]:
            ans = call(rec, port, key, rec.body[key], None, rng, give_up_s=15)
            if ans is not None:
                with lock:
                    out[key] = ans

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def drive(gw, rec, rng, stats, disk_full, violations, n_clients, seed, minutes):
    """Clients and the nemesis for `minutes`; then faults off and every client's call settled."""
    nemesis = Nemesis(gw, rec, rng, stats, disk_full, violations)
    stop_clients, stop_nemesis = threading.Event(), threading.Event()
    clients = [threading.Thread(target=client_loop, args=(rec, gw.port, i, seed, stop_clients),
                                daemon=True) for i in range(n_clients)]
    for t in clients:
        t.start()
    nt = threading.Thread(target=nemesis.run, args=(stop_nemesis,), daemon=True)
    nt.start()
    time.sleep(minutes * 60)
    stop_nemesis.set()
    nt.join()
    if isinstance(gw, Idemgate):
        gw.faults.set(sync_fail=0, sync_stall_ms=0, clock_offset_s=0)
    stop_clients.set()
    for t in clients:
        t.join(90)


def dump(workdir, rec, execs, replays):
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
            f.write(json.dumps({"key": key, "exec": eid, "body": body, "t": t}) + "\n")


def run(opts, kind="idemgate", seed=None, minutes=None, quiet=False):
    seed = opts.seed if seed is None else seed
    minutes = opts.minutes if minutes is None else minutes
    rng = random.Random(seed)
    workdir = tempfile.mkdtemp(prefix=f"chaos-{kind}-")
    store_dir = os.path.join(workdir, "store")
    os.makedirs(store_dir)
    upstream = Upstream(seed, slow_s=RESPONSE_TIMEOUT_S + 0.5)
    disk_full = None
    if kind != "planted-proxy" and not opts.no_disk_full:
        disk_full = DiskFull(store_dir)
        if not disk_full.ok:
            print(f"note: disk-full fault skipped (cannot mount a tmpfs: {disk_full.why})")
    gw = make_gateway(kind, opts, workdir, upstream.port, store_dir)
    rec, stats, violations, replays = Record(), {}, [], {}
    t_start = time.monotonic()
    try:
        took = gw.start(30)
        if took is None:
            raise SystemExit(f"the gateway did not start; see {workdir}/gateway.log")
        stats["recovery_s"] = []
        drive(gw, rec, rng, stats, disk_full, violations, opts.clients, seed, minutes)
        # The clean restart: SIGTERM, start on the same store, replay every key with an answer.
        gw.stop()
        took = gw.start(30)
        if took is None:
            violations.append(("comes back", "no answer after the clean restart"))
            replays = {}
        else:
            stats["clean restart s"] = took
            replays = replay_all(rec, gw.port, seed)
        twice = checks.check(rec, upstream.log.snapshot(), replays, opts.takeover, violations)
    finally:
        gw.stop()
        upstream.stop()
        if disk_full is not None:
            disk_full.unmount()
    stats["elapsed_s"] = time.monotonic() - t_start
    summary = summarize(kind, seed, minutes, opts, rec, upstream, stats, twice, violations)
    if not quiet or violations:
        print(summary)
    if not violations and not opts.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        dump(workdir, rec, upstream.log.snapshot(), replays)
        print(f"(answers.jsonl, executions.jsonl and gateway.log kept in {workdir})")
    return violations, stats


def summarize(kind, seed, minutes, opts, rec, upstream, stats, twice, violations):
    execs = upstream.log.snapshot()
    rs = stats.get("recovery_s", [])
    rows = [
        ("gateway", kind + ("" if kind != "idemgate" else
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
    for name in ["kills", "pauses < lease", "pauses > lease", "disk faults",
                 "disk stalls < lease", "disk stalls > lease", "disk full", "clock steps",
                 "unexpected exits"]:
        rows.append((name, stats.get(name, 0)))
    if rs:
        rows.append(("back after restart (s): max / mean",
                     f"{max(rs):.2f} / {sum(rs) / len(rs):.2f} over {len(rs)} restarts"))
    rows.append(("clean restart (s)", f"{stats.get('clean restart s', float('nan')):.2f}"))
    rows.append(("keys executed twice, and why", ", ".join(f"{k}: {v}" for k, v in
                                                           sorted(twice.items())) or "0"))
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
