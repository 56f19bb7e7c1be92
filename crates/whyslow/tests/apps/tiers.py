"""Three tiers on three hosts (network namespaces a test makes): a front
whose GET /report calls the API's GET /summary over a keep-alive session
(requests), and an API whose GET /summary reads ITEMS keys from Redis one
GET at a time (redis-py, a client of one connection per thread: an N+1);
`fixed` reads them in one MGET. Each
serves HTTP/1.1 with a thread per connection on the address it is given.
Usage: tiers.py front ADDR PORT API_ADDR API_PORT
       tiers.py api ADDR PORT REDIS_ADDR REDIS_PORT ITEMS broken|fixed"""
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
    role, addr, port, peer, peer_port = sys.argv[1:6]
    if role == "front":
        front(addr, int(port), peer, int(peer_port))
    else:
        api(addr, int(port), peer, int(peer_port), int(sys.argv[6]), sys.argv[7])
