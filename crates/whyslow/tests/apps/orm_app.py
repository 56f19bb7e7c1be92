"""An ORM app over real PostgreSQL (SQLAlchemy on psycopg2): GET /checkout
loads the orders, then each order's items lazily (one SELECT per order: an
N+1) and re-reads an unchanging tax rate per order (duplicates). With
`fixed` the items come eagerly in one `IN (...)` query and the rate once.
The app counts the statements each checkout sends and answers them as
JSON; it serves checkouts at once (a thread each, a pooled connection held
by each checkout's session) and records each statement's connection out of
band (truth.py).
Usage: orm_app.py HTTP_PORT PG_PORT ORDERS broken|fixed [ssl|unix:DIR]
With `ssl` every connection to PostgreSQL is TLS (sslmode=require); with
`unix:DIR` it goes over the server's Unix socket in DIR."""
import json
import sys
import threading

import psycopg2
import psycopg2.extensions

from sqlalchemy import Column, ForeignKey, Integer, String, create_engine, event, text
from sqlalchemy.orm import Session, declarative_base, relationship, selectinload
from sqlalchemy.pool import QueuePool

import otel_export
import truth
from jsonhttp import JsonHandler, serve

http_port, pg_port, orders = (int(a) for a in sys.argv[1:4])
fixed = sys.argv[4] == "fixed"
option = (sys.argv[5:6] or [""])[0]
sslmode = "require" if option == "ssl" else "disable"
where = (f"/postgres?host={option[5:]}&port={pg_port}&" if option.startswith("unix:")
         else f"127.0.0.1:{pg_port}/postgres?")
Base = declarative_base()


class Order(Base):
    __tablename__ = "orders"
    id = Column(Integer, primary_key=True)
    customer = Column(String)
    items = relationship("Item", lazy="select")


class Item(Base):
    __tablename__ = "items"
    id = Column(Integer, primary_key=True)
    order_id = Column(Integer, ForeignKey("orders.id"))
    sku = Column(String)




class RecordingCursor(psycopg2.extensions.cursor):
    def execute(self, query, vars=None):
        call = truth.call_start(self.connection.port)
        try:
            return super().execute(query, vars)
        finally:
            truth.call_done(call)


class RecordingConnection(psycopg2.extensions.connection):
    """Each statement, and each ROLLBACK that goes on the wire, recorded
    with this connection's local port."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.port = truth.local_port(self.fileno())

    def cursor(self, *args, **kwargs):
        kwargs.setdefault("cursor_factory", RecordingCursor)
        return super().cursor(*args, **kwargs)

    def rollback(self):
        # psycopg2 sends ROLLBACK only inside a transaction.
        in_transaction = self.status == psycopg2.extensions.STATUS_BEGIN
        call = truth.call_start(self.port) if in_transaction else None
        try:
            super().rollback()
        finally:
            truth.call_done(call)


class TimedPool(QueuePool):
    """SQLAlchemy's default pool (5 kept, 10 more opened when busy), timed:
    a checkout's time less any connection it had to open is time spent
    waiting for one of the 15 to be returned. At 16 clients that is real."""

    def _do_get(self):
        if getattr(opening, "checking_out", False):  # QueuePool retries by recursion
            return super()._do_get()
        started, opening.us, opening.checking_out = truth.now_us(), 0, True
        try:
            return super()._do_get()
        finally:
            opening.checking_out = False
            truth.pool_waited(truth.now_us() - started - opening.us)

    def _create_connection(self):
        started = truth.now_us()
        try:
            return super()._create_connection()
        finally:
            opening.us += truth.now_us() - started


opening = threading.local()
engine = create_engine(f"postgresql+psycopg2://postgres@{where}sslmode={sslmode}",
                       poolclass=TimedPool,
                       connect_args={"connection_factory": RecordingConnection})
Base.metadata.drop_all(engine)
Base.metadata.create_all(engine)
with engine.begin() as c:
    c.execute(text("DROP TABLE IF EXISTS tax"))
    c.execute(text("CREATE TABLE tax (region text, rate numeric)"))
    c.execute(text("INSERT INTO tax VALUES ('EU', 0.2)"))
with Session(engine) as s:
    for o in range(orders):
        s.add(Order(id=o + 1, customer=f"secret-customer-{o}",
                    items=[Item(sku=f"sku-{o}-{i}") for i in range(3)]))
    s.commit()
# Close the set-up connection: the first checkout opens a new one, so a
# capture started before it sees the connection from its start.
engine.dispose()
otel_export.instrument_sqlalchemy(engine)

KINDS = ("select", "insert", "update", "delete")
# Per checkout: each serving thread counts its own.
counts = threading.local()


def sent():
    if not hasattr(counts, "sent"):
        reset_counts()
    return counts.sent


def reset_counts():
    counts.sent = dict.fromkeys(KINDS + ("other",), 0)


@event.listens_for(engine, "before_cursor_execute")
def count(conn, cursor, statement, params, context, executemany):
    first = statement.lstrip().split(None, 1)[0].lower()
    sent()[first if first in KINDS else "other"] += 1


# psycopg2 sends BEGIN before a transaction's first statement and ROLLBACK
# when the session closes: statements on the wire too.
@event.listens_for(engine, "begin")
def count_begin(conn):
    sent()["other"] += 1


@event.listens_for(engine, "rollback")
def count_rollback(conn):
    sent()["other"] += 1


class Handler(JsonHandler):
    def do_GET(self):
        with truth.serving(self):
            self.checkout()

    def checkout(self):
        reset_counts()
        total = 0.0
        with Session(engine) as s:
            q = s.query(Order).order_by(Order.id)
            if fixed:
                q = q.options(selectinload(Order.items))
                rate = s.execute(text("SELECT rate FROM tax WHERE region = :r"), {"r": "EU"}).scalar()
            for order in q.all():
                if not fixed:
                    rate = s.execute(text("SELECT rate FROM tax WHERE region = :r"), {"r": "EU"}).scalar()
                total += len(order.items) * float(rate)
        self.answer(json.dumps({"statements": dict(sent()), "total": total}).encode())


serve(http_port, Handler)
