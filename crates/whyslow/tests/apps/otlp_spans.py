"""Decodes a file of OTLP trace requests as the OpenTelemetry Collector's
file exporter writes them — protobuf, each ExportTraceServiceRequest after
its length (32-bit big-endian), or OTLP/JSON, one per line with ids in hex —
with the reference protobuf definitions (opentelemetry-proto), and prints
one JSON object per span.
Usage: otlp_spans.py FILE"""
import base64
import json
import struct
import sys

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def hex_ids_to_base64(node):
    """OTLP/JSON's hex ids as protobuf's JSON mapping spells bytes."""
    if isinstance(node, list):
        for n in node:
            hex_ids_to_base64(n)
    elif isinstance(node, dict):
        for key, v in node.items():
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(v, str):
                node[key] = base64.b64encode(bytes.fromhex(v)).decode()
            else:
                hex_ids_to_base64(v)


def requests(data):
    if data[:1] == b"{":
        for line in data.decode().splitlines():
            doc = json.loads(line)
            hex_ids_to_base64(doc)
            yield json_format.ParseDict(doc, ExportTraceServiceRequest())
        return
    at = 0
    while at < len(data):
        (size,) = struct.unpack(">I", data[at:at + 4])
        yield ExportTraceServiceRequest.FromString(data[at + 4:at + 4 + size])
        at += 4 + size


for request in requests(open(sys.argv[1], "rb").read()):
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                print(json.dumps({
                    "service": resource.get("service.name"),
                    "sdk": resource.get("telemetry.sdk.name"),
                    "scope": ss.scope.name,
                    "trace": s.trace_id.hex(),
                    "span": s.span_id.hex(),
                    "parent": s.parent_span_id.hex(),
                    "kind": s.kind,
                    "name": s.name,
                    "start_ns": s.start_time_unix_nano,
                    "end_ns": s.end_time_unix_nano,
                    "attributes": attributes(s.attributes),
                    "events": [e.name for e in s.events],
                    "links": [l.span_id.hex() for l in s.links],
                    "status": s.status.code,
                }))
