# SPDX-License-Identifier: Apache-2.0
"""Concurrent clients that retry like real SDKs, and the record of everything they saw."""
import http.client
import json
import random
import threading
import time

AUTH = "Bearer chaos-merchant"
PATH = "/v1/payments"


class Record:
    """Every request and answer; which keys are in flight (for the nemesis's marks)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.inflight = {}     # key -> outstanding requests
        self.calls = {}        # key -> SDK calls under way (retries and backoff included)
        self.body = {}         # key -> the body it was first sent with
        self.finals = {}       # key -> [answer] (same body)
        self.diff = []         # (key, answer) for deliberately different bodies
        self.hits = {}         # key -> set of nemesis actions that hit it in flight
        self.active = {}       # fault -> how many are under way: a key that begins meanwhile is hit
        self.settle = {}       # fault -> until when (monotonic) a key that begins is still hit
        self.recent = []       # keys other clients may send concurrently
        self.gave_up = set()
        self.gave_up_why = {}  # key -> the last answer before giving up
        self.done = []         # keys with a final answer
        self.requests = 0
        self.statuses = {}

    def begin(self, key):
        """A request of `key` is sent; returns its number among all requests (an id to trace)."""
        with self.lock:
            self.inflight[key] = self.inflight.get(key, 0) + 1
            self.requests += 1
            now = time.monotonic()
            for reason in list(self.active) + [r for r, t in self.settle.items() if t > now]:
                self.hits.setdefault(key, set()).add(reason)
            return self.requests

    def fault_begins(self, reason):
        """Marks the keys in flight, and every key that begins until fault_ends(reason): a
        request sent during a fault and answered before its end is hit by it too."""
        with self.lock:
            self.active[reason] = self.active.get(reason, 0) + 1
        return self.mark_inflight(reason)

    def fault_ends(self, reason, settle_s=0.0):
        """Marks the keys in flight; keys that begin within `settle_s` are still hit (a fault
        whose effect outlasts it: the gateways' and the backend's connections to a restarted
        database are made again, and a fencing backend's own transactions wait for them)."""
        self.mark_inflight(reason)
        with self.lock:
            self.active[reason] -= 1
            if not self.active[reason]:
                del self.active[reason]
            until = time.monotonic() + settle_s
            self.settle[reason] = max(self.settle.get(reason, 0.0), until)

    def end(self, key, status):
        with self.lock:
            self.inflight[key] -= 1
            if self.inflight[key] == 0:
                del self.inflight[key]
            self.statuses[status] = self.statuses.get(status, 0) + 1

    def call_begins(self, key, delta):
        with self.lock:
            self.calls[key] = self.calls.get(key, 0) + delta
            if self.calls[key] == 0:
                del self.calls[key]

    def mark_calls(self, reason):
        """Marks every key whose SDK call is under way, between retries too (for the record of
        why a key gave up; never an excuse)."""
        with self.lock:
            for key in self.calls:
                self.hits.setdefault(key, set()).add(reason)

    def mark_inflight(self, reason):
        with self.lock:
            for key in self.inflight:
                self.hits.setdefault(key, set()).add(reason)
            return len(self.inflight)


def send(port, key, body, timeout, request_id=None):
    """One request; `request_id` (X-Request-Id) follows it into the gateway's access log and the
    upstream's record of executions."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Authorization": AUTH, "Idempotency-Key": key, "Content-Type": "application/json"}
    if request_id:
        headers["X-Request-Id"] = request_id
    try:
        c.request("POST", PATH, body=body, headers=headers)
        r = c.getresponse()
        return r.status, r.getheaders(), r.read()
    finally:
        c.close()


def error_code(body):
    try:
        return json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None


def retryable(status, body):
    if status == 409:
        return error_code(body) == "idempotency_key_in_use"
    if status == 503:
        return True
    return status == 502 and error_code(body) == "upstream_unavailable"


def call(rec, ports, key, body, stop, rng, give_up_s=40.0):
    rec.call_begins(key, 1)
    try:
        return call_retrying(rec, ports, key, body, rng, give_up_s)
    finally:
        rec.call_begins(key, -1)


def call_retrying(rec, ports, key, body, rng, give_up_s):
    """One SDK call: retries with backoff, each attempt to any of the gateways' `ports` (as
    behind a load balancer); returns the final answer or None (gave up)."""
    t0, delay = time.monotonic(), 0.05
    while True:
        n = rec.begin(key)
        status = "conn"
        try:
            status, headers, data = send(rng.choice(ports), key, body, timeout=10,
                                         request_id=f"{key}.{n}")
        except (OSError, http.client.HTTPException):
            pass
        finally:
            rec.end(key, status)
        if status != "conn" and not retryable(status, data):
            return (status, headers, data)
        if time.monotonic() - t0 > give_up_s:
            with rec.lock:
                rec.gave_up_why[key] = f"last answer {status} {(b'' if status == 'conn' else data)[:90]!r}"
            return None
        time.sleep(delay * (0.5 + rng.random()))
        delay = min(delay * 2, 1.0)


def client_loop(rec, ports, cid, seed, stop):
    rng = random.Random(seed * 1000 + cid)
    n = 0
    while not stop.is_set():
        with rec.lock:
            recent = list(rec.recent[-20:])
        if recent and rng.random() < 0.15:
            key = rng.choice(recent)  # the same call from a second client, maybe concurrently
            with rec.lock:
                body = rec.body[key]
        else:
            n += 1
            key = f"k{seed}-{cid}-{n}"
            body = json.dumps({"amount": rng.randint(1, 10**6), "client": cid, "n": n})
            with rec.lock:
                rec.body[key] = body
                rec.recent.append(key)
                del rec.recent[:-200]
        ans = call(rec, ports, key, body, stop, rng)
        with rec.lock:
            if ans is None:
                rec.gave_up.add(key)
                continue
            rec.finals.setdefault(key, []).append(ans)
            rec.done.append(key)
            old = rng.choice(rec.done)
        if rng.random() < 0.05:  # a finished key (maybe long ago) with a different body: 422
            other = json.dumps({"amount": -1, "client": cid, "n": n, "changed": True})
            ans2 = call(rec, ports, old, other, stop, rng)
            if ans2 is not None:
                with rec.lock:
                    rec.diff.append((old, ans2))
