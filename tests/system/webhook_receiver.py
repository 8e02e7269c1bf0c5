#!/usr/bin/env python3
"""webhook_receiver.py — a real HTTP receiver for tests/system/test_webhooks.sh.

    webhook_receiver.py PORT OUT.jsonl [--fail-first N]

Answers every POST with 200 (the first N with 500), and appends one JSON
line per request to OUT.jsonl: {"path", "status", "headers": {...}, "body"}
(the body as received, a string). Prints "ready" once listening.
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, out = int(sys.argv[1]), sys.argv[2]
fail_first = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--fail-first" else 0
seen = 0


class H(BaseHTTPRequestHandler):
    def do_POST(self):
        global seen
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n).decode("utf-8")
        seen += 1
        status = 500 if seen <= fail_first else 200
        with open(out, "a") as f:
            f.write(json.dumps({"path": self.path, "status": status, "headers": dict(self.headers),
                                "body": body}) + "\n")
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *a):
        pass


srv = ThreadingHTTPServer(("127.0.0.1", port), H)
print("ready", flush=True)
srv.serve_forever()
