#!/usr/bin/env python3
"""Writes adversarial TCP captures for `whyslow analyze` (bench/analyze_adversarial.sh).

Classic pcap, Ethernet, IPv4/TCP with right lengths and zero checksums; all
addresses in 10.0.0.0/8 (bytes in a file: no traffic is sent). Timestamps
start at 1 700 000 000 s and grow by 10 us a packet. KIND is one of:

  syn-flood       N SYNs from distinct (ip, port) pairs to 10.0.0.1:80; no
                  SYN/ACK, no FIN: no connection ever closes.
  one-packet      N connections of one packet each, as if the capture began
                  mid-connection: a lone ACK carrying 10 bytes ("GET / HTTP",
                  a request head that never ends) to one of 4 servers.
  ack-storm       one HTTP exchange, then N duplicate ACKs from the client;
                  every 1000th is followed by 100 bytes from the server
                  outside the window (alternately old, and 1 GiB ahead);
                  FIN both ways.
  out-of-order    one GET and a 200 whose head comes first, then a body of N
                  100-byte segments reversed within blocks of 1000, every 7th
                  sent twice, no client ACKs; FIN both ways. Sequence numbers
                  are right: a reassembler rebuilds exactly one exchange.
  many-exchanges  N GET/200 exchanges, 100 per keep-alive connection (one
                  segment each way, right ACK numbers), handshake and FIN each.

The truth (packets, connections, exchanges) goes to stderr, one line.

  bench/gen_adversarial.py syn-flood /tmp/syn.pcap --count 2000000
"""
import argparse
import random
import struct
import sys

BASE_SEC = 1_700_000_000
STEP_US = 10
FLUSH = 8 << 20

SYN, FIN, ACK, PSH = 0x02, 0x01, 0x10, 0x08
GET = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
CLIENT_MAC, SERVER_MAC = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")

# pcap record header, then Ethernet + IPv4 (DF, TTL 64) + TCP (no options).
RECORD = struct.Struct("<IIII")
FRAME = struct.Struct("!6s6sH" "BBHHHBBH4s4s" "HHIIBBHHH")
TS = struct.Struct("<II")
# Offsets in a record of the fields the hot loops change.
IP_SRC, TCP_SEQ, TCP_ACK = 16 + 14 + 12, 16 + 14 + 20 + 4, 16 + 14 + 20 + 8
ADDRS_PORTS_SEQ = struct.Struct("!IIHHI")  # at IP_SRC: src, dst, sport, dport, seq
ADDRS_PORTS_SEQ_ACK = struct.Struct("!IIHHII")
U32 = struct.Struct("!I")
SEQ_ACK = struct.Struct("!II")


def ip(a, b, c, d):
    return a << 24 | b << 16 | c << 8 | d


def record(src, dst, sport, dport, seq, ack, flags, payload=b""):
    """One pcap record (timestamp left zero) as a bytearray to patch."""
    ip_len = 20 + 20 + len(payload)
    to_server = dport < sport
    macs = (SERVER_MAC, CLIENT_MAC) if to_server else (CLIENT_MAC, SERVER_MAC)
    frame = FRAME.pack(*macs, 0x0800,
                       0x45, 0, ip_len, 0, 0x4000, 64, 6, 0,
                       src.to_bytes(4, "big"), dst.to_bytes(4, "big"),
                       sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                       0x50, flags, 65535, 0, 0) + payload
    return bytearray(RECORD.pack(0, 0, len(frame), len(frame)) + frame)


class Pcap:
    """Buffered writer; `put` stamps the next timestamp on a record."""

    def __init__(self, path):
        self.f = open(path, "wb")
        self.f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        self.buf = bytearray()
        self.packets = 0

    def put(self, rec):
        us = self.packets * STEP_US
        TS.pack_into(rec, 0, BASE_SEC + us // 1_000_000, us % 1_000_000)
        self.buf += rec
        self.packets += 1
        if len(self.buf) >= FLUSH:
            self.f.write(self.buf)
            self.buf = bytearray()

    def close(self):
        self.f.write(self.buf)
        self.f.close()


class Conn:
    """One TCP connection's sequence numbers, for the packets written one by one."""

    def __init__(self, out, rng, cli, srv, cport, sport):
        self.out, self.cli, self.srv, self.cport, self.sport = out, cli, srv, cport, sport
        self.cseq, self.sseq = rng.getrandbits(32), rng.getrandbits(32)

    def client(self, flags, payload=b""):
        self.out.put(record(self.cli, self.srv, self.cport, self.sport, self.cseq, self.sseq, flags, payload))
        self.cseq += len(payload) + (1 if flags & (SYN | FIN) else 0)

    def server(self, flags, payload=b""):
        self.out.put(record(self.srv, self.cli, self.sport, self.cport, self.sseq, self.cseq, flags, payload))
        self.sseq += len(payload) + (1 if flags & (SYN | FIN) else 0)

    def handshake(self):
        self.out.put(record(self.cli, self.srv, self.cport, self.sport, self.cseq, 0, SYN))
        self.cseq += 1
        self.server(SYN | ACK)
        self.client(ACK)

    def close(self):
        self.client(FIN | ACK)
        self.server(FIN | ACK)
        self.client(ACK)


def client_addr(i):
    """The i-th distinct (ip, port) pair: ports 1024..65535, then the next ip."""
    q, r = divmod(i, 64512)
    return ip(10, 1, 0, 1) + q, 1024 + r


def syn_flood(out, n, rng):
    rec = record(0, 0, 1024, 80, 0, 0, SYN)
    srv, isn = ip(10, 0, 0, 1), rng.getrandbits(32)
    for i in range(n):
        cli, port = client_addr(i)
        ADDRS_PORTS_SEQ.pack_into(rec, IP_SRC, cli, srv, port, 80, (isn + i * 2654435761) & 0xFFFFFFFF)
        out.put(rec)
    return n, 0


def one_packet(out, n, rng):
    rec = record(0, 0, 1024, 80, 0, 0, ACK, b"GET / HTTP")
    servers = [ip(10, 0, 0, k) for k in (1, 2, 3, 4)]
    isn = rng.getrandbits(32)
    for i in range(n):
        cli, port = client_addr(i)
        ADDRS_PORTS_SEQ_ACK.pack_into(rec, IP_SRC, cli, servers[i & 3], port, 80,
                                      (isn + i * 2654435761) & 0xFFFFFFFF, (isn + i * 40503) & 0xFFFFFFFF)
        out.put(rec)
    return n, 0


def ack_storm(out, n, rng):
    c = Conn(out, rng, ip(10, 1, 0, 1), ip(10, 0, 0, 1), 40000, 80)
    c.handshake()
    c.client(PSH | ACK, GET)
    c.server(PSH | ACK, OK)
    dup = record(c.cli, c.srv, c.cport, c.sport, c.cseq, c.sseq, ACK)
    stray = record(c.srv, c.cli, c.sport, c.cport, 0, c.cseq, PSH | ACK, b"x" * 100)
    for i in range(n):
        out.put(dup)
        if i % 1000 == 999:
            k = i // 1000
            off = (1 << 30) + k * 200 if k & 1 else -1_000_000 - k * 100
            U32.pack_into(stray, TCP_SEQ, (c.sseq + off) & 0xFFFFFFFF)
            out.put(stray)
    c.close()
    return 1, 1


def out_of_order(out, n, rng):
    c = Conn(out, rng, ip(10, 1, 0, 1), ip(10, 0, 0, 1), 40000, 80)
    c.handshake()
    c.client(PSH | ACK, GET)
    c.server(PSH | ACK, b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (n * 100))
    seg = record(c.srv, c.cli, c.sport, c.cport, 0, c.cseq, ACK, b"y" * 100)
    for start in range(0, n, 1000):
        for j in range(min(start + 1000, n) - 1, start - 1, -1):
            U32.pack_into(seg, TCP_SEQ, (c.sseq + j * 100) & 0xFFFFFFFF)
            out.put(seg)
            if j % 7 == 0:
                out.put(seg)
    c.sseq += n * 100
    c.close()
    return 1, 1


def many_exchanges(out, n, rng):
    conns = (n + 99) // 100
    for k in range(conns):
        cli, port = client_addr(k)
        c = Conn(out, rng, cli, ip(10, 0, 0, 1), port, 80)
        c.handshake()
        req = record(c.cli, c.srv, c.cport, c.sport, 0, 0, PSH | ACK, GET)
        resp = record(c.srv, c.cli, c.sport, c.cport, 0, 0, PSH | ACK, OK)
        for _ in range(min(100, n - k * 100)):
            SEQ_ACK.pack_into(req, TCP_SEQ, c.cseq & 0xFFFFFFFF, c.sseq & 0xFFFFFFFF)
            out.put(req)
            c.cseq += len(GET)
            SEQ_ACK.pack_into(resp, TCP_SEQ, c.sseq & 0xFFFFFFFF, c.cseq & 0xFFFFFFFF)
            out.put(resp)
            c.sseq += len(OK)
        c.close()
    return conns, n


KINDS = {"syn-flood": syn_flood, "one-packet": one_packet, "ack-storm": ack_storm,
         "out-of-order": out_of_order, "many-exchanges": many_exchanges}


def main():
    p = argparse.ArgumentParser(description="Write an adversarial TCP capture (classic pcap).")
    p.add_argument("kind", choices=KINDS)
    p.add_argument("out", metavar="OUT.pcap")
    p.add_argument("--count", type=int, required=True, help="N (see the kinds above)")
    p.add_argument("--seed", type=int, default=1, help="picks the sequence numbers")
    a = p.parse_args()
    out = Pcap(a.out)
    conns, exchanges = KINDS[a.kind](out, a.count, random.Random(a.seed))
    out.close()
    print(f"{a.kind}: packets={out.packets} connections={conns} exchanges={exchanges}", file=sys.stderr)


if __name__ == "__main__":
    main()
