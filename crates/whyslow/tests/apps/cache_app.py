"""Case 004 on a real client library (redis-py): a product page stashes a
large rendered fragment and reads a small hot key.
broken: one pipeline on one connection sends the write, then the read,
        which queues behind the write's bytes and its answer;
fixed:  a writer thread stashes on a connection of its own (one stash at
        a time; a page that finds the writer busy skips its own) and the
        page reads on another.
async:  fire and forget: a page queues its stash and answers without
        reading Redis; the writer sends what is queued as one pipeline on
        its own connection, after the pages answered (as a client that
        pipelines writes on its own does).
Pages are served at once; each command a page sends is recorded with its
connection out of band (truth.py). The writer's stashes belong to no page
there: it sends them after the page that queued one may have answered.
Usage: cache_app.py PORT REDIS_PORT VALUE_BYTES broken|fixed|async"""
import collections
import queue
import sys
import threading

import redis

import truth
from jsonhttp import JsonHandler, serve

HOT_KEY = "hot:config"
STASH_KEY = "stash:product:42"


class RecordingConnection(redis.Connection):
    """Each command recorded with this connection's port when its bytes go
    out (a pipeline's together) and done when its answer is read."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.packed = 0
        self.pending = collections.deque()

    def pack_command(self, *args):
        self.packed += 1
        return super().pack_command(*args)

    def send_packed_command(self, command, check_health=True):
        if not self._sock:
            self.connect()
        port = self._sock.getsockname()[1]
        for _ in range(self.packed):
            self.pending.append(truth.call_start(port))
        self.packed = 0
        super().send_packed_command(command, check_health)

    def read_response(self, *args, **kwargs):
        try:
            return super().read_response(*args, **kwargs)
        finally:
            if self.pending:
                truth.call_done(self.pending.popleft())


def client(redis_port):
    pool = redis.ConnectionPool(connection_class=RecordingConnection, host="127.0.0.1",
                                port=redis_port)
    return redis.Redis(connection_pool=pool)


def main(port, redis_port, value_bytes, variant):
    fixed = variant == "fixed"
    fragment = b"x" * value_bytes
    reads = client(redis_port)
    reads.set(HOT_KEY, b'{"currency":"EUR"}')
    stash = queue.Queue()
    idle = threading.Semaphore(1)

    def writer():
        writes = client(redis_port)
        while True:
            key, value = stash.get()
            writes.set(key, value)
            idle.release()

    def batch_writer():
        writes = client(redis_port)
        while True:
            batch = [stash.get()]
            while not stash.empty():
                batch.append(stash.get())
            pipe = writes.pipeline(transaction=False)
            for key, value in batch:
                pipe.set(key, value)
            pipe.execute()

    if fixed:
        threading.Thread(target=writer, daemon=True).start()
    if variant == "async":
        threading.Thread(target=batch_writer, daemon=True).start()

    class Page(JsonHandler):
        def do_GET(self):
            with truth.serving(self):
                self.page()

        def page(self):
            if variant == "async":
                stash.put((STASH_KEY, fragment))
                self.answer(b'{"product":42}\n')
                return
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

    serve(port, Page)


if __name__ == "__main__":
    port, redis_port, value_bytes, variant = sys.argv[1:5]
    main(int(port), int(redis_port), int(value_bytes), variant)
