"""A service instrumented with OpenTelemetry from PyPI: GET /checkout
opens a server span that continues an incoming `traceparent` (or starts a
trace), reads STATEMENTS rows from PostgreSQL through psycopg2 — a
connection checked out of a shared pool of POOL per statement and returned,
as Go's database/sql does, so the statements of requests in flight share
connections — and calls a backing API CALLS times at once from an executor
through requests. The psycopg2 instrumentation puts sqlcommenter comments
(`traceparent='00-…'`) on the statements of sampled traces, the requests
one a `traceparent` header on each call, the threading one carries the
span into the executor. Nothing is exported. Each call is recorded with
its connection out of band (truth.py).
Usage: otel_app.py HTTP_PORT API_PORT PG_PORT STATEMENTS CALLS POOL"""
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import psycopg2
import psycopg2.pool
import requests
from requests.adapters import HTTPAdapter

from opentelemetry import propagate, trace
from opentelemetry.instrumentation.psycopg2 import Psycopg2Instrumentor
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.instrumentation.threading import ThreadingInstrumentor
from opentelemetry.sdk.trace import TracerProvider

import truth
from jsonhttp import JsonHandler, serve

http_port, api_port, pg_port, statements, calls, pool_size = (int(a) for a in sys.argv[1:7])
# Requests served at once by the tests: only the pools may queue.
REQUESTS_AT_ONCE = 16

trace.set_tracer_provider(TracerProvider())
tracer = trace.get_tracer("otel_app")
Psycopg2Instrumentor().instrument(enable_commenter=True, commenter_options={})
RequestsInstrumentor().instrument()
ThreadingInstrumentor().instrument()

dsn = f"host=127.0.0.1 port={pg_port} user=postgres dbname=postgres"
pool = psycopg2.pool.ThreadedConnectionPool(pool_size, pool_size, dsn)
# psycopg2's pool refuses a checkout when all are out; database/sql waits.
free = threading.Semaphore(pool_size)
for c in [pool.getconn() for _ in range(pool_size)]:
    c.autocommit = True
    pool.putconn(c)
conn = pool.getconn()
with conn.cursor() as cur:
    cur.execute("DROP TABLE IF EXISTS stock")
    cur.execute("CREATE TABLE stock (sku integer PRIMARY KEY, units integer)")
    cur.execute("INSERT INTO stock SELECT g, g * 3 FROM generate_series(1, 100) g")
pool.putconn(conn)

session = requests.Session()
session.mount("http://", HTTPAdapter(pool_connections=1, pool_maxsize=calls * REQUESTS_AT_ONCE))
workers = ThreadPoolExecutor(max_workers=calls * REQUESTS_AT_ONCE)


def units(page, sku):
    """One statement on a connection checked out for it alone."""
    with free:
        conn = pool.getconn()
        try:
            record = page.start(truth.local_port(conn.fileno()))
            with conn.cursor() as cur:
                cur.execute("SELECT units FROM stock WHERE sku = %s", (sku,))
                row = cur.fetchone()
            truth.done(record)
            return row[0]
        finally:
            pool.putconn(conn)


def price(page, i):
    url = f"http://127.0.0.1:{api_port}/price/{i}"
    return truth.streamed_call(page, lambda: session.get(url, timeout=10, stream=True))


class Front(JsonHandler):
    def do_GET(self):
        context = propagate.extract(dict(self.headers))
        with tracer.start_as_current_span("GET /checkout", context=context,
                                          kind=trace.SpanKind.SERVER):
            with truth.serving(self) as page:
                stock = sum(units(page, sku) for sku in range(1, statements + 1))
                prices = list(workers.map(lambda i: price(page, i), range(calls)))
                self.answer(f'{{"stock":{stock},"prices":{sum(prices)}}}\n'.encode())


serve(http_port, Front)
