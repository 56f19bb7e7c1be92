"""Real client libraries over TLS, writing key logs: redis-py (TLS by
ssl.create_default_context, which reads SSLKEYLOGFILE), pg8000 (SSLRequest,
then TLS on the context given here) and PyMySQL (MySQL's SSL request in the
handshake, then TLS on the context given here). Usage: tls_clients.py
redis|postgres|mysql PORT KEYLOG. Prints what it sent as JSON: {request: count}."""
import json
import ssl
import sys

kind, port, keylog = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sent = {}

if kind == "redis":
    import os
    import redis
    os.environ["SSLKEYLOGFILE"] = keylog
    r = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_cert_reqs="none")
    r.set("user:u48151623x:token", "s3cr3t-redis-value")
    for _ in range(3):
        r.get("user:u48151623x:token")
    r.incr("counter:c9931x")
    sent = {"SET user:?:token": 1, "GET user:?:token": 3, "INCRBY counter:?": 1}
elif kind == "mysql":
    import pymysql
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.keylog_filename = keylog
    db = pymysql.connect(host="127.0.0.1", port=port, user="app", password="app",
                         database="shop", ssl=ctx, autocommit=True)
    with db.cursor() as c:
        for i in range(4):
            c.execute("SELECT %s + 1 AS n", (i,))
            c.fetchall()
        c.execute("SELECT 'p4ssw0rd-literal' AS secret")
        c.fetchall()
    db.close()
    sent = {"SELECT ? + ? AS n": 4, "SELECT ? AS secret": 1}
else:
    import pg8000
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.keylog_filename = keylog
    # pg8000 wraps its socket with ssl.wrap_socket after the server answers
    # SSLRequest with S; this is where an application gives it a context.
    ssl.wrap_socket = lambda sock, *a, **k: ctx.wrap_socket(sock)
    conn = pg8000.connect(user="postgres", host="127.0.0.1", port=port, database="postgres", ssl=True)
    cur = conn.cursor()
    for i in range(4):
        cur.execute("SELECT %s::int AS n", (i,))
        cur.fetchall()
    cur.execute("SELECT 'p4ssw0rd-literal' AS secret")
    cur.fetchall()
    conn.commit()
    conn.close()
    sent = {"SELECT $1::int AS n": 4, "SELECT ? AS secret": 1}
print(json.dumps(sent))
