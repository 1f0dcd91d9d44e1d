#!/usr/bin/env python3
"""Fills Umbra's cache for the purge scenario: GET /PREFIX/I?size=BYTES&cc=max-age%3D3600
[&header=Surrogate-Key:TAGS] for I in 0..N-1, pipelined over a few keep-alive connections
(BATCH requests at a time), and checks that every answer is a 200 of BYTES bytes.

usage: purge_fill.py PORT PREFIX N BYTES [TAG...]   (exit 1 and a message on any error)
Bounded: gives up after TIMEOUT seconds (300)."""
import socket
import sys
import threading
import time

CONNS, BATCH, TIMEOUT = 4, 200, 300


def main():
    port, prefix, n, size = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    tags = "+".join(sys.argv[5:])
    extra = "&header=Surrogate-Key:" + tags if tags else ""
    deadline = time.monotonic() + TIMEOUT
    errors = []

    def run(k):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=60)
            mine = list(range(k, n, CONNS))
            for b in range(0, len(mine), BATCH):
                chunk = mine[b:b + BATCH]
                s.sendall(b"".join(
                    ("GET /%s/%d?size=%d&cc=max-age%%3D3600%s HTTP/1.1\r\nHost: bench\r\n\r\n"
                     % (prefix, i, size, extra)).encode() for i in chunk))
                data, pos, got = b"", 0, 0
                while got < len(chunk):
                    if time.monotonic() > deadline:
                        raise RuntimeError("fill took longer than %d s" % TIMEOUT)
                    d = s.recv(1 << 20)
                    if not d:
                        raise RuntimeError("Umbra closed the connection")
                    data += d
                    while True:
                        end = data.find(b"\r\n\r\n", pos)
                        if end < 0:
                            break
                        head = data[pos:end].decode("latin-1").split("\r\n")
                        cl = 0
                        for line in head[1:]:
                            name, _, v = line.partition(":")
                            if name.strip().lower() == "content-length":
                                cl = int(v)
                        if len(data) < end + 4 + cl:
                            break
                        if not head[0].startswith("HTTP/1.1 200") or cl != size:
                            raise RuntimeError("answer %r with %d bytes" % (head[0], cl))
                        pos = end + 4 + cl
                        got += 1
                data = data[pos:]
            s.close()
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(CONNS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT + 10)
    if errors:
        print("purge_fill: %s" % errors[0], file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
