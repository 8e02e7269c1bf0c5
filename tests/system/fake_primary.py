#!/usr/bin/env python3
"""fake_primary.py — a stand-in for a primary scheduler that serves a
standby's bootstrap, for tests/system/test_scheduler_repl_snapshot.sh (the
standby's check of the snapshot's X-Hyperfarm-Sha256; docs/protocol.md
"Replication").

    fake_primary.py PORT GOOD BAD CLUSTER LSN MODES OUT.jsonl

GOOD is a real snapshot file (a primary's GET /api/v1/replication/snapshot
body), BAD the same bytes with one changed. Answers:

  GET /api/v1/replication           200 {"role": "primary", "term": 1,
                                    "lsn": LSN, "cluster": CLUSTER, ...}
  GET /api/v1/replication/snapshot  the n-th request takes the n-th of the
                                    comma-separated MODES (the last one
                                    once they run out):
                                      corrupt  BAD's bytes, GOOD's hash in
                                               X-Hyperfarm-Sha256
                                      nohash   GOOD's bytes, no
                                               X-Hyperfarm-Sha256
                                      good     GOOD's bytes and hash
                                      busy     503 {"error"} with
                                               Retry-After: 3 (another
                                               copy runs, as a primary
                                               answers)
                                    with X-Hyperfarm-LSN and -Cluster
  GET /api/v1/replication/stream    204 after 0.3 s (nothing new)
  anything else                     404

Environment: FAKE_SCHEMA=N puts "schema": N in GET /replication (unset:
no "schema", as a hyperfarm older than the check); FAKE_STREAM=schema409
answers every stream request 409 {"error", "reason": "schema"}, as a
primary of another schema version does (test_scheduler_repl_schema.sh);
FAKE_STREAM=toobig answers 200 with a frame header LSN+1 whose length is
64 MiB + 1 (then 1000 bytes of it: a standby must stop at the header).

Every answer carries X-Hyperfarm-Role: primary and X-Hyperfarm-Term: 1.
Appends {"method", "path", "mode", "t"} per request to OUT.jsonl (t: Unix
time, seconds). Prints
"ready".
"""
import hashlib
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, good, bad, cluster, lsn, modes, out = sys.argv[1:8]
port, lsn, modes = int(port), int(lsn), modes.split(",")
with open(good, "rb") as f:
    good_bytes = f.read()
with open(bad, "rb") as f:
    bad_bytes = f.read()
good_sha = hashlib.sha256(good_bytes).hexdigest()
snapshots = 0


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, body, ctype="application/json", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("X-Hyperfarm-Role", "primary")
        self.send_header("X-Hyperfarm-Term", "1")
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        global snapshots
        path, mode = self.path.split("?")[0], None
        if path == "/api/v1/replication/snapshot":
            mode = modes[min(snapshots, len(modes) - 1)]
            snapshots += 1
        with open(out, "a") as f:
            f.write(json.dumps({"method": "GET", "path": path, "mode": mode, "t": time.time()}) + "\n")
        if path == "/api/v1/replication":
            body = {"role": "primary", "term": 1, "lsn": lsn, "cluster": cluster, "primary": None, "peers": [],
                    "mode": "sync", "state": "none", "standby": None, "ring_first_lsn": lsn + 1}
            if os.environ.get("FAKE_SCHEMA"):
                body["schema"] = int(os.environ["FAKE_SCHEMA"])
            self.send(200, json.dumps(body).encode())
        elif mode == "busy":
            self.send(503, b'{"error": "another snapshot is being copied (one at a time): retry later"}',
                      extra=[("Retry-After", "3")])
        elif mode:
            hdrs = [("X-Hyperfarm-LSN", str(lsn)), ("X-Hyperfarm-Cluster", cluster)]
            if mode != "nohash":
                hdrs.append(("X-Hyperfarm-Sha256", good_sha))
            self.send(200, bad_bytes if mode == "corrupt" else good_bytes, "application/vnd.sqlite3", hdrs)
        elif path == "/api/v1/replication/stream" and os.environ.get("FAKE_STREAM") == "schema409":
            self.send(409, json.dumps({"error": "this primary's database is at schema version 999",
                                       "reason": "schema"}).encode())
        elif path == "/api/v1/replication/stream" and os.environ.get("FAKE_STREAM") == "toobig":
            hdr = (lsn + 1).to_bytes(8, "big") + (1).to_bytes(8, "big") + (0).to_bytes(4, "big") + \
                ((64 << 20) + 1).to_bytes(4, "big")
            self.send(200, hdr + b"\0" * 1000, "application/octet-stream", [("X-Hyperfarm-LSN", str(lsn + 1))])
        elif path == "/api/v1/replication/stream":
            time.sleep(0.3)
            self.send(204, b"", "application/octet-stream", [("X-Hyperfarm-LSN", str(lsn))])
        else:
            self.send(404, b'{"error": "no such route"}')


srv = ThreadingHTTPServer(("127.0.0.1", port), H)
print("ready", flush=True)
srv.serve_forever()
