# SPDX-License-Identifier: Apache-2.0
"""The campaign's checker on hand-made records (python3 -m unittest, from scripts/)."""
import json
import unittest

from chaos_lib import checks
from chaos_lib.clients import Record

NOT_RECORDED = (502, [("Content-Type", "application/json")],
                b'{"error":"upstream_failed","detail":"The request was forwarded upstream, but its '
                b'result could not be recorded; its outcome is unknown."}')


def created(exec_id):
    return (201, [("Content-Type", "application/json"), ("X-Exec-Id", exec_id)],
            json.dumps({"exec": exec_id, "key": "k"}).encode())


def record(answers, hits=()):
    rec = Record()
    rec.body["k"] = "{}"
    rec.finals["k"] = list(answers)
    if hits:
        rec.hits["k"] = set(hits)
    return rec


def run(rec, execs, replay, takeover=True):
    violations = []
    twice, not_recorded = checks.check(rec, [("k", e, "{}", 0) for e in execs],
                                       {"k": replay} if replay else {}, takeover, violations)
    return violations, twice, not_recorded


class ChecksTest(unittest.TestCase):
    def test_one_stored_answer_and_its_replay_pass(self):
        violations, twice, _ = run(record([created("e1"), created("e1")]), ["e1"], created("e1"))
        self.assertEqual(violations, [])
        self.assertEqual(twice, {})

    def test_two_different_answers_are_a_violation(self):
        violations, _, _ = run(record([created("e1"), created("e2")]), ["e1", "e2"],
                               created("e1"))
        self.assertIn("one final answer", [v[0] for v in violations])
        self.assertIn("at most one execution", [v[0] for v in violations])

    def test_an_answer_matching_no_execution_is_invented(self):
        violations, _, _ = run(record([created("e9")]), ["e1"], created("e9"))
        self.assertIn("no answer invented", [v[0] for v in violations])

    # Found by the PostgreSQL campaign: a failover longer than the lease made the gateway answer
    # "result could not be recorded; outcome unknown" (nothing stored); the replay then took the
    # key over and executed it again. That 502 is not a stored final answer to compare with.
    def test_not_recorded_then_takeover_during_failover_is_excused(self):
        rec = record([NOT_RECORDED], hits={"failover"})
        violations, twice, not_recorded = run(rec, ["e1", "e2"], created("e2"))
        self.assertEqual(violations, [])
        self.assertEqual(twice, {"failover": 1})
        self.assertEqual(not_recorded, {"failover": 1})

    def test_not_recorded_without_any_fault_is_a_violation(self):
        violations, _, _ = run(record([NOT_RECORDED], hits={"clock step"}), ["e1"], created("e1"))
        self.assertEqual([v[0] for v in violations], ["one final answer"])

    def test_stored_answers_around_a_not_recorded_one_must_still_agree(self):
        rec = record([created("e1"), NOT_RECORDED], hits={"kill"})
        violations, _, _ = run(rec, ["e1", "e2"], created("e2"))
        self.assertIn("one final answer", [v[0] for v in violations])

    # Found by the 30-minute RocksDB run: two keys answered only "not recorded" (disk fault) got
    # 409 for the whole replay: their in-flight lease, on the wall clock, was extended by the
    # campaign's final clock reset (a backward step). No stored answer exists to compare with.
    def test_not_recorded_and_still_in_flight_at_the_replay_is_availability(self):
        violations, _, not_recorded = run(record([NOT_RECORDED], hits={"disk fault"}), ["e1"],
                                          None)
        self.assertEqual(violations, [])
        self.assertEqual(not_recorded["(still in flight at the replay)"], 1)

    def test_a_stored_answer_without_a_replay_is_still_a_violation(self):
        violations, _, _ = run(record([created("e1")], hits={"disk fault"}), ["e1"], None)
        self.assertEqual([v[0] for v in violations], ["one final answer"])

    def test_a_second_execution_with_takeover_off_is_never_excused(self):
        rec = record([NOT_RECORDED], hits={"failover"})
        violations, _, _ = run(rec, ["e1", "e2"], created("e2"), takeover=False)
        self.assertIn("at most one execution", [v[0] for v in violations])


if __name__ == "__main__":
    unittest.main()


class FaultWindowTest(unittest.TestCase):
    def test_a_request_sent_and_answered_during_a_fault_is_hit_by_it(self):
        # Sent after the fault began and answered before it ended: in flight at neither mark.
        rec = Record()
        rec.fault_begins("db restart")
        rec.begin("during")
        rec.end("during", 502)
        rec.fault_ends("db restart", settle_s=60)
        rec.begin("after")  # within the settle time: the connections are still being made again
        rec.end("after", 201)
        self.assertEqual(rec.hits.get("during"), {"db restart"})
        self.assertEqual(rec.hits.get("after"), {"db restart"})
        violations, _, not_recorded = run_key(rec, "during", [NOT_RECORDED], created("e1"))
        self.assertEqual(violations, [])
        self.assertEqual(not_recorded, {"db restart": 1})

    def test_a_request_after_the_settle_time_is_not_hit(self):
        rec = Record()
        rec.fault_begins("failover")
        rec.fault_ends("failover", settle_s=0)
        rec.begin("later")
        self.assertIsNone(rec.hits.get("later"))
        violations, _, _ = run_key(rec, "later", [NOT_RECORDED], created("e1"))
        self.assertEqual(len(violations), 1)


def run_key(rec, key, answers, replay):
    rec.body[key] = "{}"
    rec.finals[key] = list(answers)
    violations = []
    twice, not_recorded = checks.check(rec, [(key, "e1", "{}", 0)], {key: replay}, True,
                                       violations)
    return violations, twice, not_recorded
