"""A service that calls its dependency by name: GET /quote makes CALLS
calls to the API at api.internal on a keep-alive connection of its own
thread. Broken: it resolves the name through glibc (getaddrinfo, as
/etc/resolv.conf says) before every call, as Python's requests does
without a session; fixed: it resolved "api.internal." once at start.
Each request's lookup time goes to WHYSLOW_DNS_TRUTH (one line of µs per
request) when set.
Usage: dns_app.py HTTP_PORT API_PORT CALLS broken|fixed"""
import http.client
import os
import socket
import sys
import threading
import time

from jsonhttp import JsonHandler, serve

http_port, api_port, calls = (int(a) for a in sys.argv[1:4])
fixed = sys.argv[4] == "fixed"
truth = os.environ.get("WHYSLOW_DNS_TRUTH")
lock = threading.Lock()
local = threading.local()


def resolve(name):
    infos = socket.getaddrinfo(name, api_port, proto=socket.IPPROTO_TCP)
    return next(i[4][0] for i in infos if i[0] == socket.AF_INET)


cached = resolve("api.internal.") if fixed else None


def connection():
    if getattr(local, "conn", None) is None:
        local.conn = http.client.HTTPConnection("127.0.0.1", api_port)
    return local.conn


class Handler(JsonHandler):
    def do_GET(self):
        looked_up = 0
        for i in range(calls):
            if not fixed:
                t = time.monotonic_ns()
                resolve("api.internal")
                looked_up += time.monotonic_ns() - t
            c = connection()
            c.request("GET", f"/price/{i}")
            c.getresponse().read()
        if truth:
            with lock, open(truth, "a") as f:
                f.write(f"{looked_up // 1000}\n")
        self.answer(b'{"quote": 42}')


serve(http_port, Handler)
