"""A service over a real MariaDB (PyMySQL): GET /orders reads a customer's
orders, then each order's items one query at a time (an N+1). With `fixed`
the items come in one `IN (...)` query. A pool of POOL connections is opened
at start-up, so a capture begun later sees them mid-stream.
Usage: mysql_app.py HTTP_PORT MYSQL_PORT ORDERS POOL broken|fixed"""
import json
import queue
import sys

import pymysql

from jsonhttp import JsonHandler, serve

http_port, my_port, orders, pool_size = (int(a) for a in sys.argv[1:5])
fixed = sys.argv[5] == "fixed"


def connect():
    return pymysql.connect(host="127.0.0.1", port=my_port, user="app", password="app",
                           database="shop", autocommit=True)


setup = connect()
with setup.cursor() as c:
    c.execute("CREATE TABLE IF NOT EXISTS orders (id INT PRIMARY KEY, customer INT)")
    c.execute("CREATE TABLE IF NOT EXISTS items (id INT PRIMARY KEY, order_id INT, sku VARCHAR(20))")
    c.execute("DELETE FROM orders")
    c.execute("DELETE FROM items")
    for o in range(orders):
        c.execute("INSERT INTO orders VALUES (%s, 7)", (o,))
        for i in range(3):
            c.execute("INSERT INTO items VALUES (%s, %s, %s)", (o * 10 + i, o, f"sku-{i}"))
setup.close()

pool = queue.Queue()
for _ in range(pool_size):
    pool.put(connect())


class Handler(JsonHandler):
    def do_GET(self):
        db = pool.get()
        try:
            with db.cursor() as c:
                c.execute("SELECT id FROM orders WHERE customer = %s ORDER BY id", (7,))
                ids = [r[0] for r in c.fetchall()]
                items = 0
                if fixed:
                    marks = ", ".join(["%s"] * len(ids))
                    c.execute(f"SELECT sku FROM items WHERE order_id IN ({marks})", ids)
                    items = len(c.fetchall())
                else:
                    for o in ids:
                        c.execute("SELECT sku FROM items WHERE order_id = %s", (o,))
                        items += len(c.fetchall())
        finally:
            pool.put(db)
        self.answer(json.dumps({"orders": len(ids), "items": items}).encode())


serve(http_port, Handler)
