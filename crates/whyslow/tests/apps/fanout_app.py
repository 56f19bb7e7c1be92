"""Case 002 on real client libraries: a front whose GET /dashboard makes
CALLS concurrent calls (a thread pool) to a backing API through
requests/urllib3 with a connection pool of POOL connections per host
(pool_block=True: a call waits for a free connection, as the case's runtime
did), then answers. The backing API answers each call after DELAY_MS.
Usage: fanout_app.py api PORT DELAY_MS
       fanout_app.py front PORT API_PORT CALLS POOL"""
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import ThreadingHTTPServer

import requests
from requests.adapters import HTTPAdapter

from jsonhttp import JsonHandler


def api(port, delay_ms):
    class Api(JsonHandler):
        def do_GET(self):
            time.sleep(delay_ms / 1000.0)
            self.answer(b'{"points":[1,2,3]}\n')

    ThreadingHTTPServer(("127.0.0.1", port), Api).serve_forever()


def front(port, api_port, calls, pool):
    session = requests.Session()
    adapter = HTTPAdapter(pool_connections=1, pool_maxsize=pool, pool_block=True)
    session.mount("http://", adapter)
    workers = ThreadPoolExecutor(max_workers=calls)

    def call(i):
        r = session.get(f"http://127.0.0.1:{api_port}/data/{i}", timeout=10)
        return len(r.content)

    class Front(JsonHandler):
        def do_GET(self):
            sizes = list(workers.map(call, range(calls)))
            self.answer(f"{sum(sizes)}\n".encode())

    ThreadingHTTPServer(("127.0.0.1", port), Front).serve_forever()


if sys.argv[1] == "api":
    api(int(sys.argv[2]), int(sys.argv[3]))
else:
    front(*(int(a) for a in sys.argv[2:6]))
