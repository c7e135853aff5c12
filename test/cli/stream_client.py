#!/usr/bin/env python3
"""test/cli/stream_client.py -- a hand-made sender of beamprobe's TCP stream
(docs/format.md, "Stream") for the CLI tests of `beamprobe receive`.

Every connection starts with the handshake of stream version 3:
CHALLENGE (version, our nonce), the receiver's PROOF (version, its nonce,
its HMAC when it holds a token), then HELLO with our HMAC.

  stream_client.py PORT fill            HELLO, then an empty first packet
      for threads 0, 1, ... (one file each on the receiver) until the
      receiver closes the connection (a thread id past its last)
  stream_client.py PORT token TOKEN     HELLO proving TOKEN, a packet, END;
      prints the frames the receiver confirmed (0 if it closed)
  stream_client.py PORT proof TOKEN     the handshake only: prints `proof ok'
      when the receiver's PROOF is HMAC(TOKEN, ...), `proof bad' when it is
      another, `proof none' when it sent none
  stream_client.py PORT v2              a version-2 HELLO (token in clear),
      as the previous release sent: prints what came back
  stream_client.py PORT resend           HELLO, packets 0 and 1 of thread 0,
      reads the ACK, then sends packet 1 again and packet 2, then END;
      prints the ACK counts it got
"""
import hashlib
import hmac
import os
import select
import socket
import struct
import sys
import time
import uuid as U

MAGIC = 0x31535042
HELLO, PACKET, END, ACK, CHALLENGE, PROOF = 1, 2, 3, 5, 6, 7
VERSION = 3


def frame(t, p):
    return struct.pack('<III', MAGIC, t, len(p)) + p


def recv_exact(s, n):
    b = b''
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError('closed after %d bytes' % len(b))
        b += c
    return b


def handshake(s):
    """CHALLENGE, then the receiver's PROOF: (nonce_s, nonce_r, mac or b'')."""
    ns = os.urandom(32)
    s.sendall(frame(CHALLENGE, struct.pack('<I', VERSION) + ns))
    s.settimeout(5)
    m, t, n = struct.unpack('<III', recv_exact(s, 12))
    assert m == MAGIC and t == PROOF and n in (36, 68), (m, t, n)
    p = recv_exact(s, n)
    assert struct.unpack('<I', p[:4])[0] == VERSION
    return ns, p[4:36], p[36:]


def mac(token, label, a, b):
    return hmac.new(token, label + a + b, hashlib.sha256).digest()


def hello(u, hs, token=b''):
    ns, nr, _ = hs
    proof = mac(token, b'beamprobe-sender', nr, ns) if token else b''
    return frame(HELLO, struct.pack('<I', VERSION) + u +
                 struct.pack('<I', len(proof)) + proof + b'/* CTF 1.8 */\n')


def packet(u, tid, seq):
    n = 76
    return frame(PACKET, struct.pack('<I', 0xC1FC1FC1) + u +
                 struct.pack('<IQQQQQQI', 0, 0, 0, n * 8, n * 8, 0, seq, tid))


def acks(s, want):
    """Reads ACK frames until one says `want' frames (or 5 s)."""
    s.settimeout(5)
    got, buf = [], b''
    while not got or got[-1] < want:
        b = s.recv(4096)
        if not b:
            break
        buf += b
        while len(buf) >= 20:
            m, t, n = struct.unpack('<III', buf[:12])
            assert m == MAGIC and t == ACK and n == 8, (m, t, n)
            got.append(struct.unpack('<Q', buf[12:20])[0])
            buf = buf[20:]
    return got


def main():
    port, mode = int(sys.argv[1]), sys.argv[2]
    u = U.uuid4().bytes
    s = socket.create_connection(('127.0.0.1', port))
    if mode == 'v2':
        s.sendall(frame(HELLO, struct.pack('<I', 2) + u +
                        struct.pack('<I', 6) + b's3cret' + b'/* CTF */\n'))
        s.settimeout(5)
        try:
            print('got', len(s.recv(4096)))
        except OSError:
            print('got error')
        return
    if mode == 'proof':
        ns, nr, m = handshake(s)
        want = mac(sys.argv[3].encode(), b'beamprobe-receiver', ns, nr)
        print('proof', 'none' if not m else 'ok' if m == want else 'bad')
        return
    if mode == 'token':
        # HELLO proving token argv[3], one packet, END: prints the last
        # ACK count (0 when the receiver closed instead).
        try:
            hs = handshake(s)
            s.sendall(hello(u, hs, sys.argv[3].encode()) +
                      packet(u, 0, 0) + frame(END, b''))
            a = acks(s, 2)
        except (OSError, EOFError):
            a = []
        print('acks', a[-1] if a else 0)
        return
    s.sendall(hello(u, handshake(s)))
    if mode == 'fill':
        t = 0
        try:
            while t < 5000:
                s.sendall(packet(u, t, 0))
                t += 1
                r, _, _ = select.select([s], [], [], 0.02)
                if r and not s.recv(4096):
                    break
        except OSError:
            pass
        print('files', t, flush=True)
    elif mode == 'resend':
        s.sendall(packet(u, 0, 0) + packet(u, 0, 1))
        a1 = acks(s, 2)
        s.close()
        # A reconnection that sends packet 1 again: it is skipped.
        s = socket.create_connection(('127.0.0.1', port))
        s.sendall(hello(u, handshake(s)) + packet(u, 0, 1) + packet(u, 0, 2) +
                  frame(END, b''))
        a2 = acks(s, 3)
        print('acks', a1[-1] if a1 else None, a2[-1] if a2 else None)
    s.close()


main()
