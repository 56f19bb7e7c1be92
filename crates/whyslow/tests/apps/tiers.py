"""Three tiers on three hosts (network namespaces a test makes): a front
whose GET /report calls the API's GET /summary over a keep-alive session
(requests), and an API whose GET /summary reads ITEMS keys from Redis one
GET at a time (redis-py, a client of one connection per thread: an N+1);
`fixed` reads them in one MGET. With `postgres` the API reads ITEMS rows
of PostgreSQL one SELECT at a time (psycopg2), `fixed` in one SELECT.
A page front's GET /page calls PARTS different endpoints of a parts API
one after another (`fixed`: one GET /parts that answers them all). Each
serves HTTP/1.1 with a thread per connection on the address it is given.
Usage: tiers.py front ADDR PORT API_ADDR API_PORT
       tiers.py api ADDR PORT DB_ADDR DB_PORT ITEMS broken|fixed [redis|postgres]
       tiers.py page ADDR PORT API_ADDR API_PORT PARTS broken|fixed
       tiers.py parts ADDR PORT"""
import sys
import threading
from http.server import ThreadingHTTPServer

import redis
import requests

from jsonhttp import JsonHandler


class Server(ThreadingHTTPServer):
    request_queue_size = 128
    daemon_threads = True


def serve(addr, port, handler):
    Server((addr, port), handler).serve_forever()


def front(addr, port, api_addr, api_port):
    local = threading.local()
    url = f"http://{api_addr}:{api_port}/summary"

    class Front(JsonHandler):
        def do_GET(self):
            # One session per thread: its connection kept alive.
            if not hasattr(local, "session"):
                local.session = requests.Session()
                local.session.trust_env = False
            body = local.session.get(url, timeout=10).content
            self.answer(b'{"report":' + body.strip() + b"}\n")

    serve(addr, port, Front)


def page(addr, port, api_addr, api_port, parts, variant):
    local = threading.local()
    base = f"http://{api_addr}:{api_port}"
    # Different endpoints (not one with different ids: that is an N+1).
    names = ["user", "cart", "prices", "stock", "shipping", "offers", "reviews", "tax",
             "banner", "menu", "footer", "flags"][:parts]

    class Page(JsonHandler):
        def do_GET(self):
            if not hasattr(local, "session"):
                local.session = requests.Session()
                local.session.trust_env = False
            get = lambda path: local.session.get(base + path, timeout=10).content.strip()
            if variant == "fixed":
                body = get("/parts?names=" + ",".join(names))
            else:
                body = b"[" + b",".join(get("/" + n) for n in names) + b"]"
            self.answer(b'{"page":' + body + b"}\n")

    serve(addr, port, Page)


def parts(addr, port):
    class Parts(JsonHandler):
        def do_GET(self):
            if self.path.startswith("/parts"):
                self.answer(b'{"parts":"all"}\n')
            else:
                self.answer(b'{"part":"' + self.path.rsplit("/", 1)[-1].encode() + b'"}\n')

    serve(addr, port, Parts)


def api_postgres(addr, port, db_addr, db_port, items, variant):
    import psycopg2

    dsn = f"host={db_addr} port={db_port} user=postgres dbname=postgres"
    setup = psycopg2.connect(dsn)
    setup.autocommit = True
    with setup.cursor() as c:
        c.execute("CREATE TABLE IF NOT EXISTS items (id int PRIMARY KEY, value int)")
        c.execute("INSERT INTO items SELECT g, g FROM generate_series(0, %s) g ON CONFLICT DO NOTHING", (items,))
    setup.close()
    local = threading.local()
    ids = list(range(items))

    class Api(JsonHandler):
        def do_GET(self):
            # A connection per thread, autocommit: one statement a round trip.
            if not hasattr(local, "db"):
                local.db = psycopg2.connect(dsn)
                local.db.autocommit = True
            with local.db.cursor() as c:
                if variant == "fixed":
                    c.execute("SELECT value FROM items WHERE id = ANY(%s)", (ids,))
                    values = [r[0] for r in c.fetchall()]
                else:
                    values = []
                    for i in ids:
                        c.execute("SELECT value FROM items WHERE id = %s", (i,))
                        values.append(c.fetchone()[0])
            self.answer(f'{{"total":{sum(values)}}}\n'.encode())

    serve(addr, port, Api)


def api(addr, port, redis_addr, redis_port, items, variant):
    local = threading.local()
    keys = [f"item:{i}" for i in range(items)]
    redis.Redis(host=redis_addr, port=redis_port).mset({k: str(i) for i, k in enumerate(keys)})

    class Api(JsonHandler):
        def do_GET(self):
            # A client per thread, on one connection of its own.
            if not hasattr(local, "cache"):
                local.cache = redis.Redis(host=redis_addr, port=redis_port, single_connection_client=True)
            cache = local.cache
            if variant == "fixed":
                values = cache.mget(keys)
            else:
                values = [cache.get(k) for k in keys]
            total = sum(int(v) for v in values)
            self.answer(f'{{"total":{total}}}\n'.encode())

    serve(addr, port, Api)


if __name__ == "__main__":
    role, addr, port = sys.argv[1:4]
    if role == "parts":
        parts(addr, int(port))
    elif role == "front":
        front(addr, int(port), sys.argv[4], int(sys.argv[5]))
    elif role == "page":
        page(addr, int(port), sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), sys.argv[7])
    elif sys.argv[8:9] == ["postgres"]:
        api_postgres(addr, int(port), sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), sys.argv[7])
    else:
        api(addr, int(port), sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), sys.argv[7])
