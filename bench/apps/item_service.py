"""A small Python service as services are: each GET /item/<id> reads the
item's name from Redis (redis-py) and a row from PostgreSQL (psycopg2), then
answers. A thread per connection, each with its own Redis and PostgreSQL
connection, so load from several clients keeps both cores busy.
Usage: item_service.py HTTP_PORT REDIS_PORT PG_PORT"""
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg2
import redis

http_port, redis_port, pg_port = (int(a) for a in sys.argv[1:4])
local = threading.local()


def backends():
    if not hasattr(local, "pg"):
        local.redis = redis.Redis(host="127.0.0.1", port=redis_port)
        local.pg = psycopg2.connect(host="127.0.0.1", port=pg_port, user="postgres", dbname="postgres")
        local.pg.autocommit = True
    return local.redis, local.pg


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without this, Nagle holds the
    # body for the client's delayed ACK (40 ms a request).
    disable_nagle_algorithm = True

    def do_GET(self):
        item = self.path.rsplit("/", 1)[-1]
        r, pg = backends()
        cached = r.get(f"item:{item}:name")
        with pg.cursor() as cur:
            cur.execute("SELECT %s::text || '-row' AS name", (f"item-{item}",))
            row = cur.fetchone()[0]
        body = f"{cached!r} {row}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", http_port), Handler).serve_forever()
