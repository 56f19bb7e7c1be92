"""A TLS server thread and a TLS client thread in one process, over
loopback: the client sends one HTTP request per line of MESSAGES, the server
answers each. Prints the ports and native thread ids as JSON.
Usage: tls_pair.py CERT KEY   (waits for a line on stdin before talking)"""
import json
import socket
import ssl
import sys
import threading

cert, key = sys.argv[1:3]
server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
server_ctx.load_cert_chain(cert, key)
client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
client_ctx.load_verify_locations(cert)
client_ctx.check_hostname = False
listener = socket.create_server(("127.0.0.1", 0))
port = listener.getsockname()[1]
print("ready", flush=True)
sys.stdin.readline()
REQUESTS = [b"GET /first HTTP/1.1\r\nHost: a\r\n\r\n", b"GET /second HTTP/1.1\r\nHost: a\r\n\r\n"]
out = {}


def serve():
    out["server_tid"] = threading.get_native_id()
    conn, _ = listener.accept()
    with server_ctx.wrap_socket(conn, server_side=True) as s:
        for _ in REQUESTS:
            s.recv(4096)
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


t = threading.Thread(target=serve)
t.start()
out["client_tid"] = threading.get_native_id()
with client_ctx.wrap_socket(socket.create_connection(("127.0.0.1", port))) as c:
    out["client_port"] = c.getsockname()[1]
    for r in REQUESTS:
        c.sendall(r)
        c.recv(4096)
t.join()
out["server_port"] = port
print(json.dumps(out), flush=True)
