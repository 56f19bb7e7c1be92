"""A gRPC service and its callers, on grpcio with generic handlers: each
message is raw bytes, so no code is generated. Service `shop.Items`:
`Get` answers its request after ITEM_MS, `Missing` answers NOT_FOUND.
Service `timeseriesquery.TimeSeriesQueryService`: `ServerStreamQuery`
streams POINTS messages back (a long name, as production services have).

  shop.py server PORT MAX_STREAMS      serves h2c on 127.0.0.1:PORT; MAX_STREAMS
                                       is its SETTINGS_MAX_CONCURRENT_STREAMS
                                       (0: grpcio's default)
  shop.py calls PORT                   the calls of `CALLS`, one at a time;
                                       prints what it sent, as JSON
  shop.py front PORT GRPC_PORT FANOUT AT_ONCE
                                       an HTTP front: each GET /page makes
                                       FANOUT Get calls on its one channel and
                                       answers when all are back; AT_ONCE > 0
                                       runs every page's calls through one
                                       pool of that many workers (at most
                                       AT_ONCE streams open), 0 all at once

grpcio's server with a small MAX_STREAMS refuses the streams past it
(RST_STREAM REFUSED_STREAM, which its client does not retry) rather than
letting them wait: the limit the tests queue on is the front's pool.
"""
import concurrent.futures
import http.server
import json
import sys
import time

import grpc

ITEM_MS = 10
POINTS = 3
GET, MISSING = "/shop.Items/Get", "/shop.Items/Missing"
QUERY = "/timeseriesquery.TimeSeriesQueryService/ServerStreamQuery"
# (method, message): ten different items, one asked three times more, two
# that are missing, and two streamed queries.
CALLS = [(GET, b"item-%d" % i) for i in range(10)] + [(GET, b"item-3")] * 3 + [
    (MISSING, b"item-x"),
    (MISSING, b"item-y"),
    (QUERY, b"cpu"),
    (QUERY, b"memory"),
]


def ident(b):
    return b


def get(request, context):
    time.sleep(ITEM_MS / 1000)
    return b"price of " + request


def missing(request, context):
    context.abort(grpc.StatusCode.NOT_FOUND, "no such item")


def query(request, context):
    for i in range(POINTS):
        yield b"%s point %d" % (request, i)


def server(port, max_streams):
    options = [("grpc.max_concurrent_streams", max_streams)] if max_streams else []
    s = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=64), options=options)
    handlers = {
        "Get": grpc.unary_unary_rpc_method_handler(get, ident, ident),
        "Missing": grpc.unary_unary_rpc_method_handler(missing, ident, ident),
    }
    s.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("shop.Items", handlers),))
    streams = {"ServerStreamQuery": grpc.unary_stream_rpc_method_handler(query, ident, ident)}
    s.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("timeseriesquery.TimeSeriesQueryService", streams),))
    s.add_insecure_port("127.0.0.1:%d" % port)
    s.start()
    s.wait_for_termination()


def method(channel, path):
    return channel.unary_unary(path, request_serializer=ident, response_deserializer=ident)


def calls(port):
    with grpc.insecure_channel("127.0.0.1:%d" % port) as ch:
        grpc.channel_ready_future(ch).result(timeout=10)
        sent = []
        for path, message in CALLS:
            try:
                if path == QUERY:
                    stream = ch.unary_stream(path, request_serializer=ident, response_deserializer=ident)
                    list(stream(message, timeout=10))
                else:
                    method(ch, path)(message, timeout=10)
                code = 0
            except grpc.RpcError as e:
                code = e.code().value[0]
            sent.append({"method": path, "status": code})
        print(json.dumps(sent))


def front(port, grpc_port, fanout, at_once):
    ch = grpc.insecure_channel("127.0.0.1:%d" % grpc_port)
    grpc.channel_ready_future(ch).result(timeout=10)
    item = method(ch, GET)
    workers = concurrent.futures.ThreadPoolExecutor(max_workers=at_once) if at_once else None

    def call(i):
        if workers:
            return workers.submit(item, b"item-%d" % i, timeout=10)
        return item.future(b"item-%d" % i, timeout=10)

    class Page(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            futures = [call(i) for i in range(fanout)]
            body = json.dumps({"items": len([f.result() for f in futures])}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    http.server.ThreadingHTTPServer(("127.0.0.1", port), Page).serve_forever()


if __name__ == "__main__":
    what, args = sys.argv[1], [int(a) for a in sys.argv[2:]]
    {"server": server, "calls": calls, "front": front}[what](*args)
