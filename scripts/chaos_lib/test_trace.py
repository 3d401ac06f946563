# SPDX-License-Identifier: Apache-2.0
"""The evidence printed for a key executed twice (python3 -m unittest, from scripts/)."""
import json
import os
import tempfile
import unittest

from chaos_lib import checks, trace
from chaos_lib.clients import Record


class TraceTest(unittest.TestCase):
    def test_a_twice_executed_key_shows_its_attempts_requests_and_log_lines(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "access.log"), "w") as f:
                for line in ({"time": "t1", "request_id": "k.3", "status": 409, "attempt": 1,
                              "error_detail": "attempt 1 was taken over: 3400 ms after its claim"},
                             {"time": "t2", "request_id": "k.7", "status": 201, "attempt": 2},
                             {"time": "t3", "request_id": "k2.4", "status": 201}):
                    f.write(json.dumps(line) + "\n")
                f.write("not json\n")
            with open(os.path.join(d, "gateway.log"), "w") as f:
                f.write("ERROR exchange: attempt 1 was taken over (request_id=k.3)\n")
                f.write("ERROR exchange: something else (request_id=k.30)\n")
            execs = [("k", "e1", "{}", 1.0), ("k", "e2", "{}", 3.8), ("k2", "e3", "{}", 2.0)]
            attempts = {"e1": ("1", "k.3"), "e2": ("2", "k.7"), "e3": ("1", "k2.4")}
            lines = trace.explain(d, "k", execs, attempts)
        text = "\n".join(lines)
        self.assertIn("executed at t=1.000: attempt 1, request k.3", text)
        self.assertIn("executed at t=3.800: attempt 2, request k.7", text)
        self.assertIn("k.3: status=409 attempt=1 error_detail=attempt 1 was taken over", text)
        self.assertIn("gateway.log: ERROR exchange: attempt 1 was taken over (request_id=k.3)",
                      text)
        self.assertNotIn("k2.4", text)     # another key's request
        self.assertNotIn("k.30", text)     # a request id that only starts like one of k's
        self.assertNotIn("e3", text)

    def test_the_violation_names_each_executions_attempt_and_request(self):
        rec = Record()
        rec.body["k"] = "{}"
        violations = []
        checks.check(rec, [("k", "e1", "{}", 0), ("k", "e2", "{}", 0)], {}, True, violations,
                     {"e1": ("1", "k.3"), "e2": ("2", "k.7")})
        twice = [ev for inv, ev in violations if inv == "at most one execution"]
        self.assertEqual(len(twice), 1)
        self.assertIn("[('1', 'k.3'), ('2', 'k.7')]", twice[0])


if __name__ == "__main__":
    unittest.main()
