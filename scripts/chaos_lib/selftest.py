# SPDX-License-Identifier: Apache-2.0
"""--self-test: the same campaign against planted faulty gateways; every invariant must catch
at least one of them, and each planted gateway must be caught. Exit 1 if a fault is missed."""
from . import campaign, checks

PLANTED_ROCKSDB = {
    # no idempotency at all, 3% invented answers, does not come back on its third start
    "planted-proxy": checks.INVARIANTS,
    # the real idemgate, its store wiped at each kill: completed keys execute again
    "planted-wiped-store": ["one final answer", "at most one execution",
                            "422 only for different bodies"],
}
PLANTED_PG = {
    # two idemgates on PostgreSQL with an *asynchronous* standby promoted after its WAL
    # receiver fell behind: acknowledged records are lost, their keys execute again
    "planted-pg-async": ["one final answer", "at most one execution"],
}
PLANTED_PATRONI = {
    # two idemgates on Patroni with synchronous_mode off (any lag accepted on failover), the
    # standbys' WAL receivers frozen before the leader dies: Patroni promotes a node lacking
    # acknowledged records, their keys execute again
    "planted-patroni-async": ["one final answer", "at most one execution"],
}


def run(opts):
    PLANTED = {"postgres": PLANTED_PG, "patroni": PLANTED_PATRONI}.get(opts.backend,
                                                                       PLANTED_ROCKSDB)
    minutes = min(opts.minutes, 0.5)
    caught = {}
    failed = False
    for kind, expected in PLANTED.items():
        print(f"== self-test: {kind} ({minutes:g} min, seed {opts.seed})", flush=True)
        violations, _ = campaign.run(opts, kind=kind, minutes=minutes, quiet=True)
        got = {inv for inv, _ in violations}
        caught[kind] = got
        missed = [inv for inv in expected if inv not in got]
        if missed:
            failed = True
            print(f"   NOT CAUGHT by: {', '.join(missed)}")
    w = max(len(i) for i in checks.INVARIANTS)
    print(f"\n  {'invariant':<{w}}  " + "  ".join(PLANTED))
    for inv in checks.INVARIANTS:
        cells = []
        for kind in PLANTED:
            mark = "caught" if inv in caught[kind] else ("MISSED" if inv in PLANTED[kind] else "-")
            cells.append(f"{mark:<{len(kind)}}")
        print(f"  {inv:<{w}}  " + "  ".join(cells))
    print("self-test: " + ("a planted fault was NOT caught" if failed else
                          "every planted fault caught"))
    return 1 if failed else 0
