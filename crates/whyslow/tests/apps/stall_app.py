"""Case 003's tax service on real client libraries: a checkout (requests,
one keep-alive session per worker thread) calls a tax service once per
request; the tax service blocks for STALL_MS on every EVERY-th call while
holding one lock, so every call in flight waits (a GC pause, a global lock).
With `fixed` the checkout reads the rate once at start-up and never calls;
it still renders its page for RENDER_S, so paced requests overlap (without
it an idle host answers each before the next one is due).
Each tax call is recorded with its connection out of band (truth.py).
Usage: stall_app.py tax PORT EVERY STALL_MS
       stall_app.py checkout PORT TAX_PORT broken|fixed"""
import sys
import threading
import time

import requests

import truth
from jsonhttp import JsonHandler, serve

# The fixed checkout's own work per request: twice the 2.5 ms between
# requests at the 400/s the tests pace it at, far below any finding's bound.
RENDER_S = 0.005


def tax(port, every, stall_ms):
    lock = threading.Lock()
    calls = [0]

    class Tax(JsonHandler):
        def do_GET(self):
            with lock:
                calls[0] += 1
                time.sleep(stall_ms / 1000.0 if calls[0] % every == 0 else 0.001)
            self.answer(b'{"region":"EU","rate":0.2}\n')

    serve(port, Tax)


def checkout(port, tax_port, fixed):
    local = threading.local()

    def rate():
        if not hasattr(local, "session"):
            local.session = requests.Session()
        sent_us = truth.now_us()
        r = local.session.get(f"http://127.0.0.1:{tax_port}/rate?region=EU", timeout=30,
                              stream=True)
        request = truth.current()
        call = request.start(r.raw._connection.sock.getsockname()[1], sent_us) if request else None
        rate = r.json()["rate"]
        truth.call_done(call)
        return rate

    start_rate = rate()

    class Checkout(JsonHandler):
        def do_GET(self):
            with truth.serving(self):
                if fixed:
                    time.sleep(RENDER_S)
                r = start_rate if fixed else rate()
                self.answer(f'{{"total":{100 * (1 + r)}}}\n'.encode())

    serve(port, Checkout)


if sys.argv[1] == "tax":
    tax(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
else:
    checkout(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "fixed")
