# SPDX-License-Identifier: Apache-2.0
"""The invariants, checked over the record of a campaign."""
import json

INVARIANTS = ["one final answer", "at most one execution", "no answer invented",
              "422 only for different bodies", "comes back"]
# A fault that hit a key's attempt in flight and may make a retry execute it again
# (with takeover = true only): the lost attempt's lease runs out and a retry takes over. On
# PostgreSQL, a database restart or failover that outlasts the lease keeps an attempt's
# completion from being stored in time: its retry takes over too.
EXCUSES = {"kill", "pause>lease", "crash", "disk fault", "disk stall", "disk full",
           "db restart", "failover"}


def unrecorded(ans):
    """The gateway's own "executed, but its result could not be recorded; outcome unknown"
    (502 upstream_failed; proxy/exchange.cc): the store kept failing past the lease. Nothing
    was stored, so it is not a final answer: the record stays in flight and a retry after the
    lease takes the key over (README "What can still re-execute a key")."""
    status, _headers, body = ans
    return status == 502 and b"could not be recorded" in body


# What differs between two answers of one key by design, so it is not compared: what only a
# replay carries (R2, R6), what answers a client's Prefer (§10), and each request's own id.
PER_ANSWER = {"idempotent-replayed", "age", "preference-applied", "x-request-id"}


def norm(ans):
    status, headers, body = ans
    return (status, tuple((k.lower(), v) for k, v in headers
                          if k.lower() not in PER_ANSWER), body)


def exec_id(body):
    try:
        return json.loads(body).get("exec")
    except (ValueError, AttributeError):
        return None


def check(rec, execs, replays, takeover, violations, attempts=None):
    """Appends (invariant, evidence) to violations; returns the keys executed twice by reason,
    and how many answers were the gateway's own "not recorded", by the faults in flight."""
    by_key = {}
    for key, eid, _body, _t in execs:
        by_key.setdefault(key, []).append(eid)
    twice, not_recorded = {}, {}
    for key, answers in rec.finals.items():
        check_unrecorded(rec, key, answers, not_recorded, violations)
        stored = [a for a in answers if not unrecorded(a)]
        if not stored and replays.get(key) is None and rec.hits.get(key, set()) & EXCUSES:
            # Nothing was ever stored and the record is still in flight at the replay: its
            # lease, on the wall clock, outlasts the replay (a backward clock step after the
            # claim extends it: availability, docs/behaviour.md "Known limits").
            not_recorded["(still in flight at the replay)"] = (
                not_recorded.get("(still in flight at the replay)", 0) + 1)
            continue
        check_answers(key, stored, replays.get(key), by_key.get(key, []), violations)
    for key, a in rec.diff:
        if a[0] != 422:
            violations.append(("422 only for different bodies", f"{key}: a different body "
                               f"got {a[0]} {a[2][:80]!r}, not 422"))
    count_twice(rec, by_key, takeover, twice, violations, attempts or {})
    return twice, not_recorded


def check_unrecorded(rec, key, answers, not_recorded, violations):
    n = sum(1 for a in answers if unrecorded(a))
    if not n:
        return
    why = "+".join(sorted(rec.hits.get(key, set()) & EXCUSES)) or "no fault"
    not_recorded[why] = not_recorded.get(why, 0) + n
    if why == "no fault":
        violations.append(("one final answer", f"{key}: 502 'result could not be recorded' "
                           "with no store fault, kill or pause in flight"))


def check_answers(key, answers, rp, execs, violations):
    """Every stored answer to `key` and its replay after the restart are one response, and
    none invented; 422 never for the same body."""
    first = norm(answers[0]) if answers else (norm(rp) if rp and not unrecorded(rp) else None)
    for a in answers[1:]:
        if norm(a) != first:
            violations.append(("one final answer", f"{key}: {first[0]} vs {a[0]}: "
                               f"{first[2][:80]!r} vs {a[2][:80]!r}"))
            break
    if rp is None:
        violations.append(("one final answer", f"{key}: no answer to the replay after restart"))
    elif first is None or norm(rp) != first:
        violations.append(("one final answer", f"{key}: replay after restart {rp[0]} "
                           f"{rp[2][:80]!r} vs first {first[0] if first else '-'} "
                           f"{first[2][:80] if first else ''!r}"))
    for a in answers + ([rp] if rp else []):
        if 200 <= a[0] < 300 and exec_id(a[2]) not in execs:
            violations.append(("no answer invented", f"{key}: {a[0]} {a[2][:80]!r} matches "
                               "no execution the upstream logged for this key"))
            break
        if a[0] == 422:
            violations.append(("422 only for different bodies",
                               f"{key}: 422 for the same body: {a[2][:100]!r}"))
            break


def count_twice(rec, by_key, takeover, twice, violations, attempts):
    for key, eids in by_key.items():
        if len(eids) < 2:
            continue
        hits = rec.hits.get(key, set())
        why = sorted(hits & EXCUSES)
        if takeover and why:
            reason = "+".join(why)
            twice[reason] = twice.get(reason, 0) + 1
        else:
            violations.append(("at most one execution", f"{key}: executed {len(eids)} times; "
                               f"in flight at: {sorted(hits) or 'no fault'}; (attempt, "
                               f"request id) {[attempts.get(e) for e in eids]}"
                               f"{'' if takeover else ' (takeover = false)'}"))
