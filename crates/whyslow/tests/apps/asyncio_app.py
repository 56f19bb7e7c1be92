"""An asyncio service on real client libraries: aiohttp serving every request
on one event-loop thread, asyncpg pools to PostgreSQL, redis.asyncio
(redis-py) to Redis. Requests overlap on that one thread, so no thread tells
them apart; each backing call is recorded with its connection out of band
(truth.py), the request passed along explicitly.
 - nplus1, GET /checkout (a pool of 10): a customer's ITEMS orders, then
   each order's items one SELECT at a time (an N+1); `fixed` joins them in
   one statement. Then the customer's cart from Redis (GET cart:<n>).
 - fanout, GET /dashboard (a pool of 5, all opened at start): 11 concurrent
   SELECTs of 4 ms, each on a connection of its own, so they queue for
   the 5; `fixed` does the 11 in one statement on a pool of 10. Then GET cart:<n>.
Per request, recorded: each statement (one call however many round trips
asyncpg's prepare takes), the statement the pool runs to reset a connection
it takes back (pool.release: one per acquire), and the GET (sent from
before the pool hands over its connection: a new one's handshake is
inside). pool_wait_us: time spent acquiring while no connection was idle,
summed over the request's acquires (fanout's 11 wait at once: the sum may
exceed the time the request took).
nplus1 broken: ITEMS + 3 calls, fixed: 3; fanout broken: 23, fixed: 3.
Usage: asyncio_app.py nplus1|fanout broken|fixed PORT PG_PORT REDIS_PORT [ITEMS]"""
import asyncio
import contextlib
import itertools
import json
import sys

import asyncpg
import redis.asyncio
from aiohttp import web

import truth

shape, variant = sys.argv[1:3]
port, pg_port, redis_port = (int(a) for a in sys.argv[3:6])
items = int((sys.argv[6:7] or ["20"])[0])
fixed = variant == "fixed"
CUSTOMERS = 10
FANOUT = 11
pages = itertools.count()


def local_port(transport):
    return transport.get_extra_info("sockname")[1]


async def set_up():
    """The tables, made once whoever else starts on this server: each
    customer holds at least ITEMS orders of 3 items."""
    conn = await asyncpg.connect(host="127.0.0.1", port=pg_port, user="postgres", database="postgres")
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(7702)")
        await conn.execute("CREATE TABLE IF NOT EXISTS aio_orders (id serial PRIMARY KEY, customer int)")
        await conn.execute("CREATE TABLE IF NOT EXISTS aio_items (order_id int, sku text, qty int)")
        await conn.execute("CREATE INDEX IF NOT EXISTS aio_items_order ON aio_items (order_id)")
        have = await conn.fetchval("SELECT count(*) FROM aio_orders WHERE customer = 0")
        await conn.execute("INSERT INTO aio_orders (customer) SELECT c FROM generate_series(0, $1) c,"
                           " generate_series(1, $2) k", CUSTOMERS - 1, items - have)
        await conn.execute("INSERT INTO aio_items SELECT o.id, 'sku-' || o.id || '-' || i, i"
                           " FROM aio_orders o, generate_series(1, 3) i WHERE NOT EXISTS"
                           " (SELECT 1 FROM aio_items WHERE order_id = o.id)")
    await conn.close()


@contextlib.asynccontextmanager
async def pooled(page):
    """A connection of the pool for `page`, and its local port."""
    started, all_busy = truth.now_us(), pg.get_idle_size() == 0
    conn = await pg.acquire()
    if all_busy:
        page.pool_wait_us += truth.now_us() - started
    port = local_port(conn._transport)
    try:
        yield conn, port
    finally:
        # asyncpg resets the connection it takes back: a statement on it.
        call = page.start(port)
        await pg.release(conn)
        truth.done(call)


async def fetch(page, conn, port, query, *args):
    call = page.start(port)
    rows = await conn.fetch(query, *args)
    truth.done(call)
    return rows


async def cart(page, n):
    sent_us = truth.now_us()
    conn = await cache.get_connection()
    try:
        call = page.start(local_port(conn._writer), sent_us)
        await conn.send_command("GET", f"cart:{n}")
        value = await conn.read_response()
        truth.done(call)
    finally:
        await cache.release(conn)
    return value


async def checkout(page, n):
    customer = n % CUSTOMERS
    async with pooled(page) as (conn, port):
        if fixed:
            rows = await fetch(page, conn, port,
                               "SELECT o.id, i.sku, i.qty FROM (SELECT id FROM aio_orders"
                               " WHERE customer = $1 ORDER BY id LIMIT $2) o"
                               " JOIN aio_items i ON i.order_id = o.id ORDER BY o.id", customer, items)
        else:
            rows = []
            for order in await fetch(page, conn, port, "SELECT id FROM aio_orders WHERE customer = $1"
                                     " ORDER BY id LIMIT $2", customer, items):
                rows += await fetch(page, conn, port, "SELECT sku, qty FROM aio_items"
                                    " WHERE order_id = $1", order["id"])
    return {"lines": len(rows), "qty": sum(r["qty"] for r in rows)}


async def dashboard(page, n):
    if fixed:
        # One sleep for all 11 rows (pg_sleep in FROM runs once).
        async with pooled(page) as (conn, port):
            points = [r["x"] for r in await fetch(
                page, conn, port, "SELECT x FROM generate_series(1, $1) x, pg_sleep(0.004)", FANOUT)]
    else:
        async def point(i):
            async with pooled(page) as (conn, port):
                return (await fetch(page, conn, port, "SELECT pg_sleep(0.004), $1::int AS x", i))[0]["x"]

        points = await asyncio.gather(*(point(i) for i in range(FANOUT)))
    return {"points": sum(points)}


async def serve(request, work):
    page = truth.Request(request.transport.get_extra_info("peername")[1])
    n = next(pages)
    body = await work(page, n)
    body["cart"] = (await cart(page, n % CUSTOMERS) or b"").decode()
    response = web.Response(text=json.dumps(body) + "\n", content_type="application/json")
    # Answered once written, not when handed back to aiohttp.
    await response.prepare(request)
    await response.write_eof()
    page.served()
    return response


async def pools(app):
    global pg, cache
    await set_up()
    # Fixed, the pool holds a connection for every client the tests run.
    size = {"min_size": 5, "max_size": 5} if shape == "fanout" and not fixed else {"max_size": 10}
    pg = await asyncpg.create_pool(host="127.0.0.1", port=pg_port, user="postgres",
                                   database="postgres", **size)
    cache = redis.asyncio.ConnectionPool(host="127.0.0.1", port=redis_port)
    yield
    await pg.close()
    await cache.disconnect()


path, work = ("/checkout", checkout) if shape == "nplus1" else ("/dashboard", dashboard)


async def handle(request):
    return await serve(request, work)


app = web.Application()
app.cleanup_ctx.append(pools)
app.router.add_get(path, handle)
web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)
