"""An ORM app over real PostgreSQL (SQLAlchemy on psycopg2): GET /checkout
loads the orders, then each order's items lazily (one SELECT per order: an
N+1) and re-reads an unchanging tax rate per order (duplicates). With
`fixed` the items come eagerly in one `IN (...)` query and the rate once.
The app counts the statements it sends and answers them as JSON.
Usage: orm_app.py HTTP_PORT PG_PORT ORDERS broken|fixed"""
import json
import sys
from http.server import HTTPServer

from sqlalchemy import Column, ForeignKey, Integer, String, create_engine, event, text
from sqlalchemy.orm import Session, declarative_base, relationship, selectinload

from jsonhttp import JsonHandler

http_port, pg_port, orders = (int(a) for a in sys.argv[1:4])
fixed = sys.argv[4] == "fixed"
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


engine = create_engine(f"postgresql+psycopg2://postgres@127.0.0.1:{pg_port}/postgres")
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

KINDS = ("select", "insert", "update", "delete")
sent = dict.fromkeys(KINDS + ("other",), 0)


@event.listens_for(engine, "before_cursor_execute")
def count(conn, cursor, statement, params, context, executemany):
    first = statement.lstrip().split(None, 1)[0].lower()
    sent[first if first in KINDS else "other"] += 1


# psycopg2 sends BEGIN before a transaction's first statement and ROLLBACK
# when the session closes: statements on the wire too.
@event.listens_for(engine, "begin")
def count_begin(conn):
    sent["other"] += 1


@event.listens_for(engine, "rollback")
def count_rollback(conn):
    sent["other"] += 1


class Handler(JsonHandler):
    def do_GET(self):
        for k in sent:
            sent[k] = 0
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
        self.answer(json.dumps({"statements": dict(sent), "total": total}).encode())


HTTPServer(("127.0.0.1", http_port), Handler).serve_forever()
