#!/usr/bin/env python3
"""fake_standby.py — a stand-in for a standby scheduler, for the clients'
URL-switching tests only (tests/system/test_agent_follow.sh,
tests/system/test_cli_follow.sh); the real standby is tested in
tests/system/test_scheduler_standby.sh.

    fake_standby.py PORT OUT.jsonl PRIMARY_URL|- TERM

Answers every request 503 with X-Hyperfarm-Role: standby,
X-Hyperfarm-Term: TERM and the body docs/scheduler.md gives a standby:
{"error", "role": "standby", "primary": PRIMARY_URL (null for -), "term"},
except GET /api/v1/replication (200, the standby's status, as a standby
serves it) and POST /api/v1/replication/promote (202 {"term": TERM+1};
from then on it says role primary of TERM+1 there, and a second promote
is 409, as a primary answers). Appends one JSON line per request to OUT.jsonl:
{"method", "path", "term", "lost"} (the X-Hyperfarm-Term and
X-Hyperfarm-Lost-Primary headers, null when absent). Prints "ready".
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, out, primary, term = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
primary = None if primary == "-" else primary
role = "standby"


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        n = int(self.headers.get("Content-Length", "0") or 0)
        if n:
            self.rfile.read(n)
        with open(out, "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path,
                                "term": self.headers.get("X-Hyperfarm-Term"),
                                "lost": self.headers.get("X-Hyperfarm-Lost-Primary")}) + "\n")
        global role, term
        if self.command == "POST" and self.path == "/api/v1/replication/promote":
            if role == "standby":
                role, term = "primary", term + 1
                status, body = 202, {"term": term}
            else:
                status, body = 409, {"error": "this scheduler is already the primary"}
        elif self.command == "GET" and self.path.startswith("/api/v1/replication"):
            status, body = 200, {"role": role, "term": term, "lsn": 41, "cluster": "c0ffee",
                                 "primary": primary,
                                 "peers": [{"kind": "primary", "url": primary, "following": True}] if primary else [],
                                 "mode": "sync", "state": "sync", "standby": None,
                                 "applied_lsn": 41, "lag_ms": 12}
        else:
            status, body = 503, {"error": "this scheduler is a standby (read-only)", "role": "standby",
                                 "primary": primary, "term": term}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Hyperfarm-Role", role)
        self.send_header("X-Hyperfarm-Term", str(term))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = answer

    def log_message(self, *a):
        pass


srv = ThreadingHTTPServer(("127.0.0.1", port), H)
print("ready", flush=True)
srv.serve_forever()
