#!/usr/bin/python3
"""fault_proxy.py — a TCP forwarder used to cut the network between an
agent and the scheduler in tests/system/test_fault_partition.sh.

    fault_proxy.py LISTEN_PORT TARGET_PORT

Forwards every connection to 127.0.0.1:TARGET_PORT. Stopping the process
with SIGSTOP is the partition: the kernel still accepts connections into
the listen backlog and buffers a little, but no byte moves in either
direction, exactly like packets silently dropped; SIGCONT heals it.
"""
import socket
import sys
import threading


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
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
        for a, b in ((c, u), (u, c)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()


if __name__ == "__main__":
    main()
