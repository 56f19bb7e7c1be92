"""The upstream a real resolver (dnsmasq) forwards to, a region away: it
answers every query DELAY_MS later (on its own timer, so queries do not
wait for each other), A for the names in RECORDS, NXDOMAIN for the rest.
Stands for the network between a resolver and its upstream, which this
kernel cannot delay (no netem).
Usage: dns_upstream.py PORT DELAY_MS NAME=IPV4..."""
import socket
import struct
import sys
import threading

port, delay = int(sys.argv[1]), float(sys.argv[2]) / 1000
records = dict(a.split("=") for a in sys.argv[3:])
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", port))


def answer(query):
    labels, at = [], 12
    while query[at]:
        labels.append(query[at + 1:at + 1 + query[at]].decode().lower())
        at += 1 + query[at]
    qtype = struct.unpack("!H", query[at + 1:at + 3])[0]
    question = query[12:at + 5]
    address = records.get(".".join(labels))
    rcode = 3 if address is None else 0
    found = address is not None and qtype == 1
    flags = 0x8180 | rcode
    out = query[:2] + struct.pack("!HHHHH", flags, 1, int(found), 0, 0) + question
    if found:
        out += b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 30, 4) + socket.inet_aton(address)
    return out


while True:
    data, peer = sock.recvfrom(512)
    try:
        reply = answer(data)
    except (IndexError, struct.error, UnicodeDecodeError):
        continue
    threading.Timer(delay, sock.sendto, (reply, peer)).start()
