#!/usr/bin/python3
"""fault_proxy.py — a TCP forwarder used to cut the network between an
agent and the scheduler in tests/system/test_fault_partition.sh.

    fault_proxy.py LISTEN_PORT TARGET_PORT [REQUEST_LOG]

Forwards every connection to 127.0.0.1:TARGET_PORT. With REQUEST_LOG,
every HTTP request line the clients send ("PUT /api/v1/... HTTP/1.1") is
appended to that file as "METHOD PATH" (test_ckpt_shared_fs.sh: which
requests the agents made, e.g. that no checkpoint body went over HTTP). Stopping the process
with SIGSTOP is the partition: the kernel still accepts connections into
the listen backlog and buffers a little, but no byte moves in either
direction, exactly like packets silently dropped; SIGCONT heals it.
"""
import re
import socket
import sys
import threading

REQUEST = re.compile(rb"(GET|PUT|POST|DELETE|PATCH|HEAD) (/[^ \r\n]*) HTTP/1\.[01]\r\n")
log_lock = threading.Lock()


def note_requests(log, tail, data):
    """Log the request lines in tail + data; RET the new tail (a line cut
    by the end of data is found with the next piece)."""
    buf = tail + data
    end = 0
    for m in REQUEST.finditer(buf):
        with log_lock, open(log, "ab") as f:
            f.write(m.group(1) + b" " + m.group(2) + b"\n")
        end = m.end()
    return buf[max(end, len(buf) - 512):]


def pump(src, dst, log=None):
    tail = b""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if log:
                tail = note_requests(log, tail, data)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    lport, tport = int(sys.argv[1]), int(sys.argv[2])
    log = sys.argv[3] if len(sys.argv) > 3 else None
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", lport))
    ls.listen(128)
    while True:
        c, _ = ls.accept()
        try:
            u = socket.create_connection(("127.0.0.1", tport), timeout=5)
            u.settimeout(None)
        except OSError:
            c.close()
            continue
        for a, b, lg in ((c, u, log), (u, c, None)):
            threading.Thread(target=pump, args=(a, b, lg), daemon=True).start()


if __name__ == "__main__":
    main()
