"""Case 004 on a real client library (redis-py): a product page stashes a
large rendered fragment and reads a small hot key.
broken: one pipeline on one connection sends the write, then the read,
        which queues behind the write's bytes and its answer;
fixed:  a writer thread stashes on a connection of its own (one stash at
        a time; a page that finds the writer busy skips its own) and the
        page reads on another.
Usage: cache_app.py PORT REDIS_PORT VALUE_BYTES broken|fixed"""
import queue
import sys
import threading
from http.server import ThreadingHTTPServer

import redis

from jsonhttp import JsonHandler

HOT_KEY = "hot:config"
STASH_KEY = "stash:product:42"


def main(port, redis_port, value_bytes, fixed):
    fragment = b"x" * value_bytes
    reads = redis.Redis(host="127.0.0.1", port=redis_port)
    reads.set(HOT_KEY, b'{"currency":"EUR"}')
    stash = queue.Queue()
    idle = threading.Semaphore(1)

    def writer():
        writes = redis.Redis(host="127.0.0.1", port=redis_port)
        while True:
            key, value = stash.get()
            writes.set(key, value)
            idle.release()

    if fixed:
        threading.Thread(target=writer, daemon=True).start()

    class Page(JsonHandler):
        def do_GET(self):
            if fixed:
                if idle.acquire(blocking=False):
                    stash.put((STASH_KEY, fragment))
                config = reads.get(HOT_KEY)
            else:
                pipe = reads.pipeline(transaction=False)
                pipe.set(STASH_KEY, fragment)
                pipe.get(HOT_KEY)
                _, config = pipe.execute()
            self.answer(b'{"product":42,"config":' + config + b"}\n")

    ThreadingHTTPServer(("127.0.0.1", port), Page).serve_forever()


if __name__ == "__main__":
    port, redis_port, value_bytes, variant = sys.argv[1:5]
    main(int(port), int(redis_port), int(value_bytes), variant == "fixed")
