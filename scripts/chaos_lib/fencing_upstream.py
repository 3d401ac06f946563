# SPDX-License-Identifier: Apache-2.0
"""The campaign's fencing upstream (SPEC §12, docs/fencing.md): a payment API whose executions are
rows it commits in the gateways' own PostgreSQL database, each in a transaction that first calls
idemgate_fence(Idempotency-Record, Idempotency-Attempt). An execution is a committed row -- the
database, read at the end, is the log, so a commit whose answer was lost still counts. With
fence=False it is the control: the same backend without the fence. libpq through ctypes (no
Python driver needed)."""
import ctypes
import ctypes.util
import http.server
import random
import threading
import time
import uuid

from .upstream import JsonHandler, _Server

_pq = ctypes.CDLL(ctypes.util.find_library("pq") or "libpq.so.5")
_pq.PQconnectdb.restype = ctypes.c_void_p
_pq.PQconnectdb.argtypes = [ctypes.c_char_p]
_pq.PQstatus.argtypes = [ctypes.c_void_p]
_pq.PQfinish.argtypes = [ctypes.c_void_p]
_pq.PQexecParams.restype = ctypes.c_void_p
_pq.PQexecParams.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_int]
_pq.PQresultStatus.argtypes = [ctypes.c_void_p]
_pq.PQresultErrorField.restype = ctypes.c_char_p
_pq.PQresultErrorField.argtypes = [ctypes.c_void_p, ctypes.c_int]
_pq.PQntuples.argtypes = [ctypes.c_void_p]
_pq.PQnfields.argtypes = [ctypes.c_void_p]
_pq.PQgetvalue.restype = ctypes.c_char_p
_pq.PQgetvalue.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
_pq.PQclear.argtypes = [ctypes.c_void_p]
COMMAND_OK, TUPLES_OK, SQLSTATE = 1, 2, ord("C")


class PgError(Exception):
    def __init__(self, sqlstate):
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


class Conn:
    """One blocking libpq connection."""

    def __init__(self, dsn):
        self.c = _pq.PQconnectdb(dsn.encode())
        if _pq.PQstatus(self.c) != 0:
            _pq.PQfinish(self.c)
            raise PgError("08000")

    def exec(self, sql, *params):
        vals = (ctypes.c_char_p * max(1, len(params)))(*[str(p).encode() for p in params])
        res = _pq.PQexecParams(self.c, sql.encode(), len(params), None, vals, None, None, 0)
        try:
            st = _pq.PQresultStatus(res)
            if st not in (COMMAND_OK, TUPLES_OK):
                state = _pq.PQresultErrorField(res, SQLSTATE)
                raise PgError(state.decode() if state else "08000")
            cols = _pq.PQnfields(res) if st == TUPLES_OK else 0
            return [[_pq.PQgetvalue(res, r, c).decode() for c in range(cols)]
                    for r in range(_pq.PQntuples(res))] if st == TUPLES_OK else []
        finally:
            _pq.PQclear(res)

    def close(self):
        _pq.PQfinish(self.c)


SCHEMA = ("CREATE TABLE IF NOT EXISTS chaos_intents (exec_id text PRIMARY KEY, key text NOT NULL,"
          " body text NOT NULL, attempt int, t double precision NOT NULL)")


class FencingLog:
    """The executions, as the database holds them: (key, exec_id, body, t)."""

    def __init__(self, dsn):
        self.dsn = dsn
        self.fenced = 0  # attempts the fence refused (rolled back, nothing done)
        self.lock = threading.Lock()
        self.final = None
        self.final_attempts = {}

    def snapshot(self):
        """Read once, at the end (while the database is still up); the same list afterwards."""
        if self.final is not None:
            return self.final
        for _ in range(60):  # the database may be between a failover's steps
            try:
                c = Conn(self.dsn)
                try:
                    rows = c.exec("SELECT key, exec_id, body, t::text, attempt::text FROM "
                                  "chaos_intents")
                finally:
                    c.close()
                self.final = [(k, e, b, float(t)) for k, e, b, t, _ in rows]
                self.final_attempts = {e: (a if a != "0" else None, None)
                                       for _, e, _, _, a in rows}
                return self.final
            except PgError:
                time.sleep(1)
        raise RuntimeError("the executions could not be read from PostgreSQL")

    def attempts(self):
        """{exec_id: (attempt, None)}: the attempt each execution committed with (no request id
        is kept in the table)."""
        self.snapshot()
        return self.final_attempts


def make_handler(log, fence, rng, rng_lock, slow_s):
    local = threading.local()

    class Handler(JsonHandler):
        def _execute(self, key, exec_id, body):
            """One transaction: the fence, then the business write. True once committed."""
            if getattr(local, "conn", None) is None:
                local.conn = Conn(log.dsn)
            c = local.conn
            try:
                c.exec("BEGIN")
                record = self.headers.get("Idempotency-Record")
                attempt = self.headers.get("Idempotency-Attempt")
                if fence and record and attempt:
                    c.exec("SELECT idemgate_fence($1, $2)", record, attempt)
                c.exec("INSERT INTO chaos_intents VALUES ($1, $2, $3, $4, $5)", exec_id, key,
                       body, attempt or 0, time.monotonic())
                c.exec("COMMIT")
                return True
            except PgError as e:
                try:
                    c.exec("ROLLBACK")
                except PgError:
                    pass
                if e.sqlstate != "IG001":  # the connection broke, or the server is restarting
                    c.close()
                    local.conn = None
                raise

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n).decode(errors="replace")
            key = self.headers.get("Idempotency-Key") or ""
            exec_id = uuid.uuid4().hex
            obj = {"exec": exec_id, "key": key}
            try:
                self._execute(key, exec_id, body)
            except PgError as e:
                if e.sqlstate == "IG001":
                    with log.lock:
                        log.fenced += 1
                    return self._answer(409, dict(obj, error="attempt_fenced"))
                # Rolled back, nothing done; a final answer (a 503 would be retried forever).
                return self._answer(500, dict(obj, error="ledger_unavailable"))
            self._answer_executed(obj, rng, rng_lock, slow_s)

    return Handler


class FencingUpstream:
    """Started once the database is up (it creates its table there)."""

    def __init__(self, seed, slow_s, fence):
        self.seed, self.slow_s, self.fence = seed, slow_s, fence
        self.server = None
        self.port = None
        # The port is needed before the database is up (the gateways' config): bind now.
        self.server = _Server(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler,
                              bind_and_activate=True)
        self.port = self.server.server_address[1]
        self.log = None

    def start(self, dsn):
        self.log = FencingLog(dsn)
        for _ in range(60):
            try:
                c = Conn(dsn)
                c.exec(SCHEMA)
                c.close()
                break
            except PgError:
                time.sleep(0.5)
        self.server.RequestHandlerClass = make_handler(
            self.log, self.fence, random.Random(self.seed), threading.Lock(), self.slow_s)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        if getattr(self, "thread", None) is not None:
            self.server.shutdown()
        self.server.server_close()
