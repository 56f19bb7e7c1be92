"""Resolves names through glibc (getaddrinfo, A and AAAA in parallel, as
most services do) one after another, as /etc/resolv.conf says: its search
list, ndots, timeout and attempts, UDP or TCP (`options use-vc`).

usage: dns_lookups.py NAME[,NAME...] LOOKUPS
Prints {"lookups": N, "failed": F, "ms": [each lookup's time]} as JSON.
"""
import json
import socket
import sys
import time

names = sys.argv[1].split(",")
lookups = int(sys.argv[2])
ms, failed = [], 0
for i in range(lookups):
    name = names[i % len(names)]
    t = time.monotonic()
    try:
        socket.getaddrinfo(name, 80, proto=socket.IPPROTO_TCP)
    except socket.gaierror:
        failed += 1
    ms.append((time.monotonic() - t) * 1000)
print(json.dumps({"lookups": lookups, "failed": failed, "ms": ms}))
