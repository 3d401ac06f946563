# SPDX-License-Identifier: Apache-2.0
"""The campaign's PostgreSQL pair: every fault the nemesis uses, twice in a row on the same
directories and ports, and no acknowledged row lost (python3 -m unittest, from scripts/)."""
import unittest

from chaos_lib.pg import PgCluster


class PgClusterTest(unittest.TestCase):
    def setUp(self):
        self.pg = PgCluster(synchronous=True)
        self.pg.start()
        self.insert("CREATE TABLE t (x int)")

    def tearDown(self):
        self.pg.stop()

    def insert(self, sql):
        self.assertIsNotNone(self.pg.sql(self.pg.primary, sql), sql)

    def count(self):
        return self.pg.sql(self.pg.primary, "SELECT count(*) FROM t")

    # Found by the campaign: a server killed with SIGKILL stayed a zombie (nobody reaped it),
    # its lock files still "owned", so restarting it on its directory or port failed.
    def test_crash_restarts_and_failovers_repeat(self):
        for i in range(2):
            self.pg.restart(self.pg.primary, crash=True)
            self.insert(f"INSERT INTO t VALUES ({i})")
            self.pg.restart(self.pg.standby, crash=True)
            self.insert(f"INSERT INTO t VALUES ({i})")
        for freeze in (0.0, 0.5, 0.0):
            self.pg.failover(freeze_s=freeze)
            self.insert("INSERT INTO t VALUES (9)")
        self.assertEqual(self.count(), "7")
        state = self.pg.sql(self.pg.primary, "SELECT sync_state FROM pg_stat_replication")
        self.assertEqual(state, "sync")


if __name__ == "__main__":
    unittest.main()
