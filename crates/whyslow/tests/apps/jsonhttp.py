"""The test apps' HTTP/1.1 handler base: keep-alive, JSON answers, quiet."""
from http.server import BaseHTTPRequestHandler


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
