"""A client that starts a sampled W3C trace per request, as an instrumented
front end does: CLIENTS threads, each on its own keep-alive connection,
send REQUESTS GETs in all with a fresh `traceparent` each.
Usage: traced_client.py HOST PORT PATH REQUESTS CLIENTS"""
import http.client
import itertools
import secrets
import sys
import threading

host, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
requests_total, clients = int(sys.argv[4]), int(sys.argv[5])
numbers = itertools.count()
errors = []


def client():
    conn = http.client.HTTPConnection(host, port, timeout=30)
    while next(numbers) < requests_total:
        traceparent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
        conn.request("GET", path, headers={"traceparent": traceparent})
        r = conn.getresponse()
        r.read()
        if r.status != 200:
            errors.append(r.status)
    conn.close()


threads = [threading.Thread(target=client) for _ in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if errors:
    sys.exit(f"{len(errors)} requests failed: {errors[:5]}")
