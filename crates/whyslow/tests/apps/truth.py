"""What a test app records out of band, never on the wire: per inbound
request, each backing call it made, with the local port of the connection
the call used, its sending order across the app, and when it was sent and
done (µs since the Unix epoch, the clock packets are stamped with). One
JSON line per served request, in the file named by WHYSLOW_TRUTH; nothing
is recorded without it. The tests hold whyslow's attribution to it."""
import itertools
import json
import os
import socket
import threading
import time

_path = os.environ.get("WHYSLOW_TRUTH")
_lock = threading.Lock()
_seq = itertools.count()
_current = threading.local()


def now_us():
    return time.time_ns() // 1000


def local_port(fd):
    """The local port of the socket on file descriptor `fd`; for a
    Unix-domain socket, its inode's low 15 bits, which no ephemeral TCP port
    (32768 and up) can be mistaken for."""
    s = socket.socket(fileno=os.dup(fd))
    try:
        if s.family == socket.AF_UNIX:
            return os.fstat(fd).st_ino & 0x7FFF
        return s.getsockname()[1]
    finally:
        s.close()


class Request:
    """One inbound request and its calls; `served` writes it out."""

    def __init__(self, client_port):
        self.client_port = client_port
        self.received_us = now_us()
        self.calls = []
        self.pool_wait_us = 0

    def start(self, port, sent_us=None):
        """A call on the connection from `port`, about to be sent, or — for
        a client that picks its connection inside the call (a pool) — sent
        since `sent_us` and holding that connection now."""
        with _lock:
            call = {"local_port": port, "seq": next(_seq),
                    "sent_us": sent_us or now_us(), "done_us": 0}
        self.calls.append(call)
        return call

    def served(self):
        if not _path:
            return
        line = json.dumps({"client_port": self.client_port, "received_us": self.received_us,
                           "answered_us": now_us(), "calls": self.calls,
                           "pool_wait_us": self.pool_wait_us})
        with _lock, open(_path, "a") as f:
            f.write(line + "\n")


def done(call):
    call["done_us"] = now_us()


def streamed_call(request, get):
    """A call for `request` through a client pool that picks its connection
    inside the call (requests/urllib3): `get()` sends it streamed, so the
    connection stays with the response until it is read and can be asked
    its port. Returns the response body's length."""
    sent_us = now_us()
    r = get()
    call = request.start(r.raw._connection.sock.getsockname()[1], sent_us)
    size = len(r.content)
    done(call)
    return size


class serving:
    """`with serving(handler):` — the request `handler` just read is this
    thread's current request until it is answered."""

    def __init__(self, handler):
        self.request = Request(handler.client_address[1])

    def __enter__(self):
        _current.request = self.request
        return self.request

    def __exit__(self, *exc):
        _current.request = None
        self.request.served()


def current():
    """This thread's request, or None (set-up work, a writer thread)."""
    return getattr(_current, "request", None)


def call_start(port):
    """A call on `port` for this thread's request, if it serves one."""
    r = current()
    return r.start(port) if r else None


def call_done(call):
    if call is not None:
        done(call)


def pool_waited(us):
    """Time this thread's request spent waiting for a pooled connection
    (all were checked out): the app's own measure of pool queueing."""
    r = current()
    if r:
        r.pool_wait_us += us
