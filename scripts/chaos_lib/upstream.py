# SPDX-License-Identifier: Apache-2.0
"""The campaign's upstream: logs every execution (key + a unique execution id) and answers at
random: 2xx, 4xx, 5xx, slowly past the gateway's response_timeout, or closes without answering."""
import http.server
import json
import random
import socketserver
import threading
import time
import uuid


class ExecLog:
    def __init__(self):
        self.lock = threading.Lock()
        self.execs = []  # (key, exec_id, body, t)
        self._attempts = {}  # exec_id -> (the gateway's Idempotency-Attempt, X-Request-Id)

    def add(self, key, exec_id, body, attempt=None, request_id=None):
        with self.lock:
            self.execs.append((key, exec_id, body, time.monotonic()))
            self._attempts[exec_id] = (attempt, request_id)

    def snapshot(self):
        with self.lock:
            return list(self.execs)

    def attempts(self):
        """{exec_id: (attempt, request id)}, each as the gateway sent it (None: not sent)."""
        with self.lock:
            return dict(self._attempts)


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass  # a client (the gateway) that went away mid-request


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """What both campaign upstreams share: HTTP/1.1, quiet, JSON answers, GET is a health check."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _answer(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Exec-Id", obj.get("exec", "-"))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._answer(200, {"ok": True})

    def _answer_executed(self, obj, rng, rng_lock, slow_s):
        """The answer to an executed request, drawn: 201, 400, 500, a 201 too late (504
        upstream_timeout), or a close without answering (502 upstream_failed)."""
        with rng_lock:
            r = rng.random()
        if r < 0.70:
            self._answer(201, obj)
        elif r < 0.78:
            self._answer(400, dict(obj, error="declined"))
        elif r < 0.86:
            self._answer(500, dict(obj, error="boom"))
        elif r < 0.93:
            time.sleep(slow_s)  # past the gateway's response_timeout: 504 upstream_timeout
            try:
                self._answer(201, obj)
            except OSError:
                pass
        else:
            self.close_connection = True  # closes without answering: 502 upstream_failed


def make_handler(log, rng, rng_lock, slow_s):
    class Handler(JsonHandler):
        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n).decode(errors="replace")
            key = self.headers.get("Idempotency-Key") or ""
            exec_id = uuid.uuid4().hex
            log.add(key, exec_id, body, self.headers.get("Idempotency-Attempt"),
                    self.headers.get("X-Request-Id"))
            self._answer_executed({"exec": exec_id, "key": key}, rng, rng_lock, slow_s)

    return Handler


class Upstream:
    def __init__(self, seed, slow_s):
        self.log = ExecLog()
        handler = make_handler(self.log, random.Random(seed), threading.Lock(), slow_s)
        self.server = _Server(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
