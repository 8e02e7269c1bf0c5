#!/usr/bin/python3
"""upload_fault_proxy.py — an HTTP-aware TCP forwarder that damages
checkpoint uploads, for tests/system/test_multiserver_upload_fault.sh.

    upload_fault_proxy.py LISTEN_HOST:PORT TARGET_HOST:PORT FAULT[,FAULT...]

Forwards every connection to TARGET. On the client-to-server side it
follows the HTTP/1.1 requests of each connection (keep-alive, bodies
framed by Content-Length; a chunked request switches that connection to
plain forwarding) and applies the FAULTs, in order, to the first uploads
it sees (PUT requests whose path contains "/checkpoints"):

    corrupt    one byte in the middle of the body is inverted; the length is
               kept, so only the SHA-256 can tell
    truncate   half of the body is sent, then both connections are closed
               (an upload cut by a network failure)
    pass       forwarded untouched

Later uploads and every other request pass untouched. Each fault is
printed on stdout ("fault N: corrupt PUT /path (BYTES bytes, byte K)"),
and for a corrupted upload the status line of its response too
("fault N: response HTTP/1.1 422 ...") — the test asserts on both.
"""
import socket
import sys
import threading

lock = threading.Lock()
faults = []
used = 0


def log(msg):
    with lock:
        print(msg, flush=True)


def next_fault(method, path):
    global used
    if method != b"PUT" or b"/checkpoints" not in path:
        return None, 0
    with lock:
        if used >= len(faults):
            return None, 0
        used += 1
        return faults[used - 1], used


def close(*socks):
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Conn:
    def __init__(self, c, u):
        self.c, self.u = c, u
        self.await_status = 0      # fault number whose response to report

    def server_to_client(self):
        try:
            while True:
                data = self.u.recv(65536)
                if not data:
                    break
                if self.await_status:
                    for line in data.split(b"\r\n"):
                        if line.startswith(b"HTTP/1.") and b" 100 " not in line:
                            log("fault %d: response %s" % (self.await_status, line.decode("latin-1")))
                            self.await_status = 0
                            break
                self.c.sendall(data)
        except OSError:
            pass
        finally:
            close(self.c, self.u)

    def client_to_server(self):
        c, u = self.c, self.u
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = c.recv(65536)
                    if not data:
                        return
                    buf += data
                    if len(buf) > (1 << 20):
                        raise ValueError("header too long")
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                parts = lines[0].split(b" ")
                method, path = (parts + [b"", b""])[:2]
                hdr = {}
                for line in lines[1:]:
                    k, _, v = line.partition(b":")
                    hdr[k.strip().lower()] = v.strip()
                u.sendall(head + b"\r\n\r\n")
                if b"chunked" in hdr.get(b"transfer-encoding", b"").lower():
                    u.sendall(buf)     # not ours to follow: plain forwarding from here on
                    while True:
                        data = c.recv(65536)
                        if not data:
                            return
                        u.sendall(data)
                n = int(hdr.get(b"content-length", b"0") or 0)
                fault, num = next_fault(method, path)
                if fault == "pass" or n < 2:
                    fault = None
                mid = n // 2
                if fault:
                    log("fault %d: %s %s %s (%d bytes, byte %d)" % (num, fault, method.decode(), path.decode(), n, mid))
                    if fault == "corrupt":
                        self.await_status = num
                sent = 0
                while sent < n:
                    if not buf:
                        buf = c.recv(65536)
                        if not buf:
                            return
                    take, buf = buf[:n - sent], buf[n - sent:]
                    if fault == "truncate" and sent + len(take) >= mid:
                        u.sendall(take[:mid - sent])
                        close(c, u)
                        return
                    if fault == "corrupt" and sent <= mid < sent + len(take):
                        b = bytearray(take)
                        b[mid - sent] ^= 0xFF
                        take = bytes(b)
                    u.sendall(take)
                    sent += len(take)
        except (OSError, ValueError):
            pass
        finally:
            close(c, u)


def addr(s):
    host, _, port = s.rpartition(":")
    return host, int(port)


def main():
    global faults
    if len(sys.argv) != 4:
        sys.exit("usage: upload_fault_proxy.py LISTEN_HOST:PORT TARGET_HOST:PORT FAULT[,FAULT...]")
    listen, target = addr(sys.argv[1]), addr(sys.argv[2])
    faults = sys.argv[3].split(",")
    for f in faults:
        if f not in ("corrupt", "truncate", "pass"):
            sys.exit("upload_fault_proxy.py: unknown fault %r (corrupt, truncate, pass)" % f)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(listen)
    ls.listen(128)
    log("listening on %s:%d, forwarding to %s:%d, faults %s" % (listen + target + (",".join(faults),)))
    while True:
        c, _ = ls.accept()
        try:
            u = socket.create_connection(target, timeout=5)
            u.settimeout(None)
        except OSError:
            c.close()
            continue
        k = Conn(c, u)
        threading.Thread(target=k.client_to_server, daemon=True).start()
        threading.Thread(target=k.server_to_client, daemon=True).start()


if __name__ == "__main__":
    main()
