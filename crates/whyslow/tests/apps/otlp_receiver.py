"""An OTLP/HTTP receiver built on the reference protobuf definitions
(opentelemetry-proto): each POST /v1/traces body is decoded as an
ExportTraceServiceRequest (a body that does not decode is answered 400)
and appended to FILE framed as the Collector's file exporter frames it.
A gzip body (Content-Encoding: gzip) is gunzipped first, as a Collector
does. With HEADER (NAME=VALUE), a POST without that header is answered 401,
as a Collector behind an authenticator answers it.
Usage: otlp_receiver.py PORT FILE [HEADER]"""
import gzip
import struct
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PORT, OUT = int(sys.argv[1]), sys.argv[2]
REQUIRED = sys.argv[3].split("=", 1) if len(sys.argv) > 3 else None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if REQUIRED and self.headers.get(REQUIRED[0]) != REQUIRED[1]:
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        ok = self.path == "/v1/traces" and \
            self.headers["Content-Type"] == "application/x-protobuf"
        try:
            request = ExportTraceServiceRequest.FromString(body)
        except Exception:
            ok = False
        if ok:
            with open(OUT, "ab") as f:
                f.write(struct.pack(">I", len(body)) + body)
        reply = ExportTraceServiceResponse().SerializeToString() if ok else b"bad"
        self.send_response(200 if ok else 400)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


open(OUT, "wb").close()
HTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
