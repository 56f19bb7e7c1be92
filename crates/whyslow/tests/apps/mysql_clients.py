"""Two real MySQL clients against one server, each with its own statements:
PyMySQL (the text protocol: COM_QUERY with its literals, COM_PING, an error)
and MySQL Connector/Python with a prepared cursor (COM_STMT_PREPARE, then
COM_STMT_EXECUTE per call, COM_STMT_CLOSE). Prints what each sent as JSON.
Usage: mysql_clients.py PORT ROUNDS"""
import json
import sys

import mysql.connector
import pymysql

port, rounds = int(sys.argv[1]), int(sys.argv[2])
sent = {"text_select": 0, "text_insert": 0, "errors": 0, "pings": 0,
        "prepared_select": 0}

db = pymysql.connect(host="127.0.0.1", port=port, user="app", password="app",
                     database="shop", autocommit=True)
with db.cursor() as c:
    c.execute("CREATE TABLE users (id INT PRIMARY KEY, email VARCHAR(80))")
    for i in range(rounds):
        c.execute("INSERT INTO users VALUES (%s, %s)", (i, f"secret-{i}@example.com"))
        sent["text_insert"] += 1
    for i in range(rounds):
        c.execute("SELECT email FROM users WHERE id = %s", (i,))
        c.fetchall()
        sent["text_select"] += 1
    try:
        c.execute("INSERT INTO users VALUES (%s, %s)", (0, "again"))
    except pymysql.err.IntegrityError:
        sent["errors"] += 1
db.ping(reconnect=False)
sent["pings"] += 1
db.close()

cx = mysql.connector.connect(host="127.0.0.1", port=port, user="app", password="app",
                             database="shop", use_pure=True, autocommit=True)
cur = cx.cursor(prepared=True)
for i in range(rounds):
    cur.execute("SELECT id, email FROM users WHERE id > ? AND id < ?", (i, i + 3))
    cur.fetchall()
    sent["prepared_select"] += 1
cur.close()
cx.close()
print(json.dumps(sent))
