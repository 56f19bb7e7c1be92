// A Node.js service as production runs one: node's http server, a pg
// (node-postgres) Pool and one ioredis client, every request served on the
// one event-loop thread, many at once. With no thread per request, nothing
// on the machine tells which request a backing call was for: the calls of
// requests in flight interleave on one thread and share pooled connections.
//
//   nplus1, GET /checkout: a customer's ITEMS orders on one checked-out
//     connection, then (broken) each order's items one SELECT at a time, an
//     N+1, or (fixed) all of them in one JOIN; then the cart from Redis.
//   fanout, GET /dashboard: (broken) FANOUT concurrent 4 ms statements,
//     each on a connection of its own from a pool of 5 (POOL), so they
//     queue for one; or (fixed) one statement that sleeps 4 ms once and
//     returns the FANOUT rows; then the cart from Redis.
//
// With WHYSLOW_TRUTH set, each request is recorded out of band as
// apps/truth.py records one: one JSON line when answered, with its client
// port, when it was read and answered, its waits for a pooled connection,
// and each call with the local port of the connection that carried it. A
// call is tied to its request by the request's record passed along, never
// by a "current request": requests interleave on the one thread.
//
// Tables node_orders and node_items are made at start if missing; the pool
// opens its connections in the first requests, Redis is connected first.
//
// Usage: node app.js nplus1|fanout broken|fixed PORT PG_PORT REDIS_PORT [ITEMS]
"use strict";
const fs = require("node:fs");
const http = require("node:http");
const { performance } = require("node:perf_hooks");
const { Client, Pool } = require("pg");
const Redis = require("ioredis");

const [shape, variant, port, pgPort, redisPort] = process.argv.slice(2, 7);
const ITEMS = Number(process.argv[7] || 20);
const fixed = variant === "fixed";
const CUSTOMER = 1;
const FANOUT = 11;
// Fixed, the pool holds a connection for every client the tests run.
const POOL = shape === "fanout" && !fixed ? 5 : 10;
const TRUTH = process.env.WHYSLOW_TRUTH;
const pg = { host: "127.0.0.1", port: Number(pgPort), user: "postgres", database: "postgres" };

// µs since the Unix epoch, to the µs: Date.now() has only milliseconds.
const nowUs = () => Math.round((performance.timeOrigin + performance.now()) * 1000);
let seq = 0;

/** One inbound request and the calls made for it (apps/truth.py). */
class Page {
  constructor(req) {
    this.client_port = req.socket.remotePort;
    this.received_us = nowUs();
    this.calls = [];
    this.pool_wait_us = 0;
    this.waiting = 0; // checkouts of this page queued for a connection now
  }

  /** `send()` on the connection from `localPort`, timed and numbered. */
  async call(localPort, send) {
    const call = { local_port: localPort, seq: seq++, sent_us: nowUs(), done_us: 0 };
    this.calls.push(call);
    try {
      return await send();
    } finally {
      call.done_us = nowUs();
    }
  }

  served() {
    if (!TRUTH) return;
    const { client_port, received_us, calls, pool_wait_us } = this;
    const line = { client_port, received_us, answered_us: nowUs(), calls, pool_wait_us };
    fs.appendFileSync(TRUTH, JSON.stringify(line) + "\n");
  }
}

const pool = new Pool({ ...pg, max: POOL });
const redis = new Redis({ host: "127.0.0.1", port: Number(redisPort) });

/** A pooled connection for `page`. Asked for with all checked out (none
 * idle, none left to open), it waits for one to be returned. The page's
 * pool_wait_us is the time it had such a checkout waiting: its checkouts
 * at once (fanout) count once, as the request's own clock sees them. */
async function checkout(page) {
  const queued = pool.idleCount === 0 && pool.totalCount >= POOL;
  if (queued && page.waiting++ === 0) page.waitingSince = nowUs();
  try {
    return await pool.connect();
  } finally {
    if (queued && --page.waiting === 0) page.pool_wait_us += nowUs() - page.waitingSince;
  }
}

async function query(page, client, text, values) {
  const localPort = client.connection.stream.localPort;
  return (await page.call(localPort, () => client.query(text, values))).rows;
}

const cart = (page) => page.call(redis.stream.localPort, () => redis.get(`cart:${CUSTOMER}`));

const ORDERS = "SELECT id FROM node_orders WHERE customer = $1 ORDER BY id LIMIT $2";
const ITEMS_OF = "SELECT sku, qty FROM node_items WHERE order_id = $1";
const ITEMS_JOINED =
  "SELECT o.id, i.sku, i.qty FROM node_orders o JOIN node_items i ON i.order_id = o.id " +
  "WHERE o.id = ANY($1::int[]) ORDER BY o.id";

async function checkoutPage(page) {
  const client = await checkout(page);
  let orders;
  let items = [];
  try {
    orders = await query(page, client, ORDERS, [CUSTOMER, ITEMS]);
    if (fixed) {
      items = await query(page, client, ITEMS_JOINED, [orders.map((o) => o.id)]);
    } else {
      for (const o of orders) items.push(...(await query(page, client, ITEMS_OF, [o.id])));
    }
  } finally {
    client.release();
  }
  return { orders: orders.length, items: items.length, cart: await cart(page) };
}

async function pooled(page, text, values) {
  const client = await checkout(page);
  try {
    return await query(page, client, text, values);
  } finally {
    client.release();
  }
}

async function dashboardPage(page) {
  let rows;
  if (fixed) {
    const once = "SELECT pg_sleep(0.004), array_agg(x) AS xs FROM generate_series(1, $1::int) x";
    rows = (await pooled(page, once, [FANOUT]))[0].xs;
  } else {
    const each = (i) => pooled(page, "SELECT pg_sleep(0.004), $1::int AS x", [i]);
    rows = (await Promise.all([...Array(FANOUT).keys()].map(each))).flat();
  }
  return { panels: rows.length, cart: await cart(page) };
}

const route = { nplus1: ["/checkout", checkoutPage], fanout: ["/dashboard", dashboardPage] }[shape];
if (!route || !["broken", "fixed"].includes(variant)) {
  console.error("usage: node app.js nplus1|fanout broken|fixed PORT PG_PORT REDIS_PORT [ITEMS]");
  process.exit(2);
}

function answer(res, status, body) {
  const data = JSON.stringify(body) + "\n";
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(data) });
  res.end(data);
}

async function setUp() {
  // One connection of its own, closed before serving: the pool's are new.
  const c = new Client(pg);
  await c.connect();
  try {
    await c.query("BEGIN");
    await c.query("SELECT pg_advisory_xact_lock(8620)"); // apps starting at once
    await c.query("CREATE TABLE IF NOT EXISTS node_orders (id serial PRIMARY KEY, customer int NOT NULL)");
    await c.query(
      "CREATE TABLE IF NOT EXISTS node_items (order_id int NOT NULL REFERENCES node_orders, sku text, qty int)",
    );
    await c.query("CREATE INDEX IF NOT EXISTS node_items_order ON node_items (order_id)");
    // Orders enough for ITEMS, three items each.
    await c.query(
      "WITH o AS (INSERT INTO node_orders (customer) SELECT $1::int FROM generate_series(1, " +
        "$2::int - (SELECT count(*) FROM node_orders WHERE customer = $1::int)) RETURNING id) " +
        "INSERT INTO node_items SELECT id, 'sku-' || id || '-' || k, k FROM o, generate_series(1, 3) k",
      [CUSTOMER, ITEMS],
    );
    await c.query("COMMIT");
  } finally {
    await c.end();
  }
  await redis.set(`cart:${CUSTOMER}`, JSON.stringify({ skus: ["sku-1-1", "sku-2-2"] }));
}

setUp().then(
  () => {
    const [path, handle] = route;
    const server = http.createServer((req, res) => {
      const page = new Page(req);
      const work = req.method === "GET" && req.url === path ? handle(page) : Promise.resolve(null);
      work
        .then(
          (body) => (body ? answer(res, 200, body) : answer(res, 404, { error: "not found" })),
          (err) => answer(res, 500, { error: String(err.message || err) }),
        )
        .finally(() => page.served());
    });
    server.keepAliveTimeout = 60_000;
    server.listen(Number(port), "127.0.0.1", () => console.log(`listening on 127.0.0.1:${port}`));
  },
  (err) => {
    console.error(`set-up failed: ${err.stack || err}`);
    process.exit(1);
  },
);
