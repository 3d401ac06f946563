"""The invariants, checked over the record of a campaign."""
import json

INVARIANTS = ["one final answer", "at most one execution", "no answer invented",
              "422 only for different bodies", "comes back"]
# A fault that hit a key's attempt in flight and may make a retry execute it again
# (with takeover = true only): the lost attempt's lease runs out and a retry takes over.
EXCUSES = {"kill", "pause>lease", "crash", "disk fault", "disk stall", "disk full"}


# What differs between two answers of one key by design: a replay's mark, and each request's id.
PER_ANSWER = {"idempotent-replayed", "x-request-id"}


def norm(ans):
    status, headers, body = ans
    return (status, tuple((k.lower(), v) for k, v in headers
                          if k.lower() not in PER_ANSWER), body)


def exec_id(body):
    try:
        return json.loads(body).get("exec")
    except (ValueError, AttributeError):
        return None


def check(rec, execs, replays, takeover, violations):
    """Appends (invariant, evidence) to violations; returns the keys executed twice by reason."""
    by_key = {}
    for key, eid, _body, _t in execs:
        by_key.setdefault(key, []).append(eid)
    twice = {}
    for key, answers in rec.finals.items():
        first = norm(answers[0])
        for a in answers[1:]:
            if norm(a) != first:
                violations.append(("one final answer", f"{key}: {first[0]} vs {a[0]}: "
                                   f"{first[2][:80]!r} vs {a[2][:80]!r}"))
                break
        rp = replays.get(key)
        if rp is None:
            violations.append(("one final answer", f"{key}: no answer to the replay after restart"))
        elif norm(rp) != first:
            violations.append(("one final answer", f"{key}: replay after restart {rp[0]} "
                               f"{rp[2][:80]!r} vs first {first[0]} {first[2][:80]!r}"))
        for a in answers + ([rp] if rp else []):
            if 200 <= a[0] < 300 and exec_id(a[2]) not in by_key.get(key, []):
                violations.append(("no answer invented", f"{key}: {a[0]} {a[2][:80]!r} matches "
                                   "no execution the upstream logged for this key"))
                break
            if a[0] == 422:
                violations.append(("422 only for different bodies",
                                   f"{key}: 422 for the same body: {a[2][:100]!r}"))
                break
    for key, a in rec.diff:
        if a[0] != 422:
            violations.append(("422 only for different bodies", f"{key}: a different body "
                               f"got {a[0]} {a[2][:80]!r}, not 422"))
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
                               f"in flight at: {sorted(hits) or 'no fault'}"
                               f"{'' if takeover else ' (takeover = false)'}"))
    return twice
