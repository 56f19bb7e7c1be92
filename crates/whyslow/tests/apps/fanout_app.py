"""Case 002 on real client libraries: a front whose GET /dashboard makes
CALLS concurrent calls (a thread pool) to a backing API through
requests/urllib3 with a connection pool of POOL connections per host
(pool_block=True: a call waits for a free connection, as the case's runtime
did), then answers. The backing API answers each call after DELAY_MS.
Pages are served at once, their calls on one pool; each call is recorded
with its connection out of band (truth.py).
With a certificate the API serves HTTPS and the front calls it over TLS,
trusting that certificate alone. With --threads-per-page each page starts
threads of its own for its calls and joins them before answering (an
executor per page); without, all pages hand their calls to one executor.
Usage: fanout_app.py api PORT DELAY_MS [CERT KEY]
       fanout_app.py front PORT API_PORT CALLS POOL [CERT] [--threads-per-page]"""
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import requests
from requests.adapters import HTTPAdapter

import truth
from jsonhttp import JsonHandler, serve

# Threads enough for the calls of many pages at once: only the pool queues.
PAGES_AT_ONCE = 16


def api(port, delay_ms, tls=None):
    class Api(JsonHandler):
        def do_GET(self):
            time.sleep(delay_ms / 1000.0)
            self.answer(b'{"points":[1,2,3]}\n')

    serve(port, Api, tls)


def front(port, api_port, calls, pool, cert=None, per_page=False):
    session = requests.Session()
    # REQUESTS_CA_BUNDLE in the environment would override `verify`.
    session.trust_env = False
    session.verify = cert or True
    scheme = "https" if cert else "http"
    adapter = HTTPAdapter(pool_connections=1, pool_maxsize=pool, pool_block=True)
    session.mount(f"{scheme}://", adapter)
    workers = ThreadPoolExecutor(max_workers=calls * PAGES_AT_ONCE)

    def call(page, i):
        url = f"{scheme}://127.0.0.1:{api_port}/data/{i}"
        return truth.streamed_call(page, lambda: session.get(url, timeout=10, stream=True))

    class Front(JsonHandler):
        def do_GET(self):
            with truth.serving(self) as page:
                if per_page:
                    with ThreadPoolExecutor(max_workers=calls) as own:
                        sizes = list(own.map(lambda i: call(page, i), range(calls)))
                else:
                    sizes = list(workers.map(lambda i: call(page, i), range(calls)))
                self.answer(f"{sum(sizes)}\n".encode())

    serve(port, Front)


if sys.argv[1] == "api":
    api(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:6] or None)
else:
    per_page = "--threads-per-page" in sys.argv
    rest = [a for a in sys.argv[6:] if a != "--threads-per-page"]
    front(*(int(a) for a in sys.argv[2:6]), *rest[:1], per_page=per_page)
