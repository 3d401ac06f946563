# SPDX-License-Identifier: Apache-2.0
"""The evidence for one key: every request of it (the clients send X-Request-Id = key.N) as the
gateways' access logs saw it, the gateways' own log lines that name those requests, and the
upstream's executions with the attempt each came from."""
import glob
import json
import os


def _access_lines(workdir, key):
    out = []
    for path in sorted(glob.glob(os.path.join(workdir, "access*.log"))):
        with open(path, errors="replace") as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("request_id", "").rsplit(".", 1)[0] == key:
                    out.append((os.path.basename(path), entry))
    return out


def _log_lines(workdir, request_ids):
    out = []
    for path in sorted(glob.glob(os.path.join(workdir, "gateway*.log"))):
        with open(path, errors="replace") as f:
            out += [f"{os.path.basename(path)}: {line.rstrip()}" for line in f
                    if any(f"request_id={rid})" in line for rid in request_ids)]
    return out


def explain(workdir, key, execs, attempts):
    """Lines that tell what happened to `key`, oldest first within each source."""
    lines = [f"trace of {key}:"]
    for k, eid, _body, t in execs:
        if k == key:
            attempt, rid = attempts.get(eid, (None, None))
            lines.append(f"  executed at t={t:.3f}: attempt {attempt}, request {rid}")
    fields = ("status", "outcome", "attempt", "latency_ms", "upstream_ms", "error_detail")
    access = _access_lines(workdir, key)
    for name, e in access:
        shown = " ".join(f"{f}={e[f]}" for f in fields if f in e)
        lines.append(f"  {name} {e.get('time', '?')} {e.get('request_id')}: {shown}")
    lines += ["  " + line for line in _log_lines(workdir, {e.get("request_id") for _, e in access})]
    return lines
