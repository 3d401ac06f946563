# SPDX-License-Identifier: Apache-2.0
"""A planted faulty gateway for --self-test: forwards every request (no idempotency), answers
3% of POSTs with an invented 201 that never went upstream, and fails to start on start #3."""
import http.client
import http.server
import json
import random
import socketserver
import sys
import uuid


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass  # a client (the gateway) that went away mid-request


def run(port, upstream_port, start_no):
    if start_no == 3:
        sys.exit(1)
    rng = random.Random(start_no)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def _relay(self, method):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n)
            if method == "POST" and rng.random() < 0.03:
                status, headers = 201, [("Content-Type", "application/json")]
                data = json.dumps({"exec": uuid.uuid4().hex, "key": "invented"}).encode()
            else:
                try:
                    c = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=1)
                    c.request(method, self.path, body=body, headers=dict(self.headers))
                    r = c.getresponse()
                    status, headers, data = r.status, r.getheaders(), r.read()
                    c.close()
                except (OSError, http.client.HTTPException):
                    status, headers = 502, [("Content-Type", "application/json")]
                    data = b'{"error":"upstream_failed","detail":"x"}'
            self.send_response(status)
            for k, v in headers:
                if k.lower() not in ("content-length", "connection", "date", "server",
                                     "transfer-encoding"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._relay("GET")

        def do_POST(self):
            self._relay("POST")

    _Server(("127.0.0.1", port), Handler).serve_forever()
