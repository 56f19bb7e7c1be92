"""The test apps' HTTP/1.1 handler base: keep-alive, JSON answers, quiet."""
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class JsonHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # http.server writes headers and body separately: without TCP_NODELAY
    # each response would wait for the client's delayed ACK (40 ms).
    disable_nagle_algorithm = True

    def answer(self, body):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    """A thread per connection, and a listen backlog for many clients
    connecting at once: socketserver's default of 5 drops the SYNs of the
    rest, which the client's kernel sends again a second later."""
    request_queue_size = 128
    daemon_threads = True


def serve(port, handler, tls=None):
    """Serves until killed; `tls`: (certificate, key) to serve HTTPS."""
    import otel_export
    server = Server(("127.0.0.1", port), otel_export.traced(handler, port))
    if tls:
        import ssl
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()
