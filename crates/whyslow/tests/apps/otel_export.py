"""OpenTelemetry for the test apps, from PyPI, turned on by the environment:
WHYSLOW_OTEL_SERVICE names the service; spans go to WHYSLOW_OTLP_FILE, as
the Collector's file exporter writes them (`.json`: OTLP/JSON, one
request per line, ids in hex; else protobuf, each request after its 4-byte
big-endian length), both encoded by the SDK's own OTLP encoder, or to
WHYSLOW_OTLP_ENDPOINT over OTLP/HTTP (protobuf, gzip) with the SDK's
exporter. requests and threads (executors) are instrumented; each HTTP
request the app serves is a SERVER span continuing an incoming
`traceparent`. On SIGTERM every span is flushed before the process ends.
Nothing happens without WHYSLOW_OTEL_SERVICE."""
import base64
import json
import os
import signal
import threading

SERVICE = os.environ.get("WHYSLOW_OTEL_SERVICE")
tracer = None
provider = None

if SERVICE:
    from google.protobuf.json_format import MessageToDict
    from opentelemetry import propagate, trace
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.instrumentation.requests import RequestsInstrumentor
    from opentelemetry.instrumentation.threading import ThreadingInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class FileExporter(SpanExporter):
        """The SDK's OTLP encoding, written as the Collector's file exporter does."""

        def __init__(self, path):
            self.path = path
            self.lock = threading.Lock()

        def export(self, spans):
            request = encode_spans(spans)
            if self.path.endswith(".json"):
                data = (json.dumps(otlp_json(request)) + "\n").encode()
            else:
                body = request.SerializeToString()
                data = len(body).to_bytes(4, "big") + body
            with self.lock, open(self.path, "ab") as f:
                f.write(data)
            return SpanExportResult.SUCCESS

        def shutdown(self):
            pass

    def otlp_json(request):
        """OTLP/JSON: protobuf's JSON mapping with enums as integers and
        trace and span ids in hex, not base64."""
        doc = MessageToDict(request, use_integers_for_enums=True)
        for rs in doc.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in span:
                            span[key] = base64.b64decode(span[key]).hex()
        return doc

    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    if os.environ.get("WHYSLOW_OTLP_FILE"):
        exporter = FileExporter(os.environ["WHYSLOW_OTLP_FILE"])
    elif os.environ["WHYSLOW_OTLP_ENDPOINT"].startswith("grpc://"):
        # OTLP/gRPC, the SDKs' default protocol, to host:port.
        from grpc import Compression
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        exporter = OTLPSpanExporter(endpoint=os.environ["WHYSLOW_OTLP_ENDPOINT"][len("grpc://"):],
                                    insecure=True, compression=Compression.Gzip)
    else:
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        exporter = OTLPSpanExporter(endpoint=os.environ["WHYSLOW_OTLP_ENDPOINT"] + "/v1/traces",
                                    compression=Compression.Gzip)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=500))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("whyslow-test-apps")
    RequestsInstrumentor().instrument()
    ThreadingInstrumentor().instrument()

    def flush_and_exit(*_):
        provider.shutdown()
        os._exit(0)

    signal.signal(signal.SIGTERM, flush_and_exit)


def instrument_sqlalchemy(engine):
    """The ORM's statements as CLIENT spans (SQLAlchemy's instrumentation)."""
    if SERVICE:
        from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
        SQLAlchemyInstrumentor().instrument(engine=engine)


def traced(handler, port):
    """`handler` (a BaseHTTPRequestHandler class) with each GET a SERVER span."""
    if not SERVICE:
        return handler
    from opentelemetry import propagate, trace

    class Traced(handler):
        def do_GET(self):
            context = propagate.extract(dict(self.headers))
            route = self.path.split("?")[0]
            attributes = {"http.request.method": "GET", "url.path": route,
                          "server.address": "127.0.0.1", "server.port": port}
            with tracer.start_as_current_span(f"GET {route}", context=context,
                                              kind=trace.SpanKind.SERVER, attributes=attributes):
                super().do_GET()

    return Traced
