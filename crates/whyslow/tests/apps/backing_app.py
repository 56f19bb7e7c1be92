"""A small web app with two backing services, on real client libraries:
each GET /item/<id> reads the item from Redis (redis-py) and its row from
PostgreSQL (psycopg2), then answers. Connections are opened on the first
request, so a capture started before it sees them from their start.
Usage: backing_app.py HTTP_PORT REDIS_PORT PG_PORT"""
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

import psycopg2
import redis

http_port, redis_port, pg_port = (int(a) for a in sys.argv[1:4])
backends = {}


def connections():
    if not backends:
        backends["redis"] = redis.Redis(host="127.0.0.1", port=redis_port)
        pg = psycopg2.connect(host="127.0.0.1", port=pg_port, user="postgres", dbname="postgres")
        pg.autocommit = True
        backends["pg"] = pg
    return backends["redis"], backends["pg"]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        item = self.path.rsplit("/", 1)[-1]
        r, pg = connections()
        cached = r.get(f"item:{item}:name")
        with pg.cursor() as cur:
            cur.execute("SELECT %s::text || '-row' AS name", (f"secret-{item}",))
            row = cur.fetchone()[0]
        body = f"{cached!r} {len(row)}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", http_port), Handler).serve_forever()
