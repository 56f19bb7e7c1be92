//! A tokio service on real crates: axum serves each request as a task on
//! the multi-threaded runtime's workers (a task may move between them, and
//! each worker runs many requests' tasks at once), tokio-postgres
//! connections in a deadpool pool. No thread tells requests apart; each
//! backing call is recorded with its connection out of band (apps/truth.py's
//! format), the request passed along explicitly.
//!  - nplus1, GET /checkout (a pool of 10): a customer's ITEMS orders, then
//!    each order's items one SELECT at a time (an N+1); `fixed` joins them
//!    in one statement.
//!  - fanout, GET /dashboard (a pool of 5, all opened at start): 11
//!    concurrent SELECTs of 4 ms, each on a connection of its own, so they
//!    queue for the 5; `fixed` does the 11 in one statement on a pool of 10.
//!
//! Statements are prepared once per connection as it opens (one exchange a
//! call after that); the pool recycles a connection it takes back without a
//! statement. pool_wait_us: time spent acquiring while no connection was
//! idle, summed over the request's acquires.
//! nplus1 broken: ITEMS + 1 calls, fixed: 1; fanout broken: 11, fixed: 1.
//! Usage: tokio-app nplus1|fanout broken|fixed PORT PG_PORT [ITEMS]

use axum::extract::{ConnectInfo, State};
use axum::routing::get;
use axum::{Json, Router};
use deadpool::managed::{self, Metrics, RecycleResult};
use serde_json::{json, Value};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Row, Statement};

const CUSTOMERS: u64 = 10;
const FANOUT: i32 = 11;

static SEQ: AtomicU64 = AtomicU64::new(0);
static TRUTH: Mutex<Option<std::fs::File>> = Mutex::new(None);

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// One pooled connection, its local port and its prepared statements.
struct Conn {
    client: Client,
    port: u16,
    statements: Vec<Statement>,
}

/// The statements every connection prepares, by index.
const ORDERS: usize = 0;
const ITEMS: usize = 1;
const JOINED: usize = 2;
const POINT: usize = 3;
const POINTS: usize = 4;
const SQL: [&str; 5] = [
    "SELECT id FROM tk_orders WHERE customer = $1 ORDER BY id LIMIT $2",
    "SELECT sku, qty FROM tk_items WHERE order_id = $1",
    "SELECT o.id, i.sku, i.qty FROM (SELECT id FROM tk_orders WHERE customer = $1 \
     ORDER BY id LIMIT $2) o JOIN tk_items i ON i.order_id = o.id ORDER BY o.id",
    "SELECT pg_sleep(0.004)::text, $1::int AS x",
    "SELECT pg_sleep(0.004)::text, x FROM generate_series(1, $1::int) x",
];

struct Postgres {
    port: u16,
}

async fn connect(port: u16) -> Result<(Client, u16), String> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let local = stream.local_addr().map_err(|e| e.to_string())?.port();
    let (client, connection) = tokio_postgres::Config::new()
        .user("postgres")
        .dbname("postgres")
        .connect_raw(stream, NoTls)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    Ok((client, local))
}

impl managed::Manager for Postgres {
    type Type = Conn;
    type Error = String;

    async fn create(&self) -> Result<Conn, String> {
        let (client, port) = connect(self.port).await?;
        let mut statements = Vec::new();
        for sql in SQL {
            statements.push(client.prepare(sql).await.map_err(|e| e.to_string())?);
        }
        Ok(Conn {
            client,
            port,
            statements,
        })
    }

    async fn recycle(&self, conn: &mut Conn, _: &Metrics) -> RecycleResult<String> {
        match conn.client.is_closed() {
            true => Err(managed::RecycleError::message("closed")),
            false => Ok(()),
        }
    }
}

type Pool = managed::Pool<Postgres>;

/// One inbound request's record.
struct Page {
    client_port: u16,
    received_us: u64,
    pool_wait_us: u64,
    calls: Vec<Value>,
}

type Shared = Arc<Mutex<Page>>;

struct App {
    pool: Pool,
    fixed: bool,
    items: i32,
    pages: AtomicU64,
}

impl App {
    async fn acquire(&self, page: &Shared) -> managed::Object<Postgres> {
        let (started, all_busy) = (now_us(), self.pool.status().available == 0);
        let conn = self.pool.get().await.expect("a pooled connection");
        if all_busy {
            page.lock().unwrap().pool_wait_us += now_us() - started;
        }
        conn
    }
}

/// Statement `which` on `conn` for `page`, recorded as one call.
async fn query(page: &Shared, conn: &Conn, which: usize, args: &[&(dyn ToSql + Sync)]) -> Vec<Row> {
    let (seq, sent_us) = (SEQ.fetch_add(1, Ordering::SeqCst), now_us());
    let rows = conn
        .client
        .query(&conn.statements[which], args)
        .await
        .expect("a query");
    let call =
        json!({"local_port": conn.port, "seq": seq, "sent_us": sent_us, "done_us": now_us()});
    page.lock().unwrap().calls.push(call);
    rows
}

fn served(page: Shared, body: Value) -> Json<Value> {
    let p = page.lock().unwrap();
    let line = json!({
        "client_port": p.client_port,
        "received_us": p.received_us,
        "answered_us": now_us(),
        "pool_wait_us": p.pool_wait_us,
        "calls": p.calls,
    });
    if let Some(f) = TRUTH.lock().unwrap().as_mut() {
        writeln!(f, "{line}").unwrap();
    }
    Json(body)
}

fn page_of(peer: SocketAddr) -> Shared {
    Arc::new(Mutex::new(Page {
        client_port: peer.port(),
        received_us: now_us(),
        pool_wait_us: 0,
        calls: Vec::new(),
    }))
}

async fn checkout(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Json<Value> {
    let page = page_of(peer);
    let customer = (app.pages.fetch_add(1, Ordering::SeqCst) % CUSTOMERS) as i32;
    let conn = app.acquire(&page).await;
    let mut lines = 0;
    if app.fixed {
        lines = query(&page, &conn, JOINED, &[&customer, &(app.items as i64)])
            .await
            .len();
    } else {
        let orders = query(&page, &conn, ORDERS, &[&customer, &(app.items as i64)]).await;
        for order in orders {
            let id: i32 = order.get(0);
            lines += query(&page, &conn, ITEMS, &[&id]).await.len();
        }
    }
    drop(conn);
    served(page, json!({ "lines": lines }))
}

async fn dashboard(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Json<Value> {
    let page = page_of(peer);
    let points: i64 = if app.fixed {
        let conn = app.acquire(&page).await;
        let rows = query(&page, &conn, POINTS, &[&FANOUT]).await;
        rows.iter().map(|r| i64::from(r.get::<_, i32>(1))).sum()
    } else {
        let point = |i: i32| {
            let (app, page) = (app.clone(), page.clone());
            async move {
                let conn = app.acquire(&page).await;
                let rows = query(&page, &conn, POINT, &[&i]).await;
                i64::from(rows[0].get::<_, i32>(1))
            }
        };
        futures_util::future::join_all((0..FANOUT).map(point))
            .await
            .into_iter()
            .sum()
    };
    served(page, json!({ "points": points }))
}

/// The tables, made once whoever else starts on this server: each customer
/// holds at least ITEMS orders of 3 items.
async fn set_up(pg_port: u16, items: i32) {
    let (mut client, _) = connect(pg_port).await.expect("PostgreSQL");
    let tx = client.transaction().await.unwrap();
    tx.batch_execute(
        "SELECT pg_advisory_xact_lock(7703);
         CREATE TABLE IF NOT EXISTS tk_orders (id serial PRIMARY KEY, customer int);
         CREATE TABLE IF NOT EXISTS tk_items (order_id int, sku text, qty int);
         CREATE INDEX IF NOT EXISTS tk_items_order ON tk_items (order_id);",
    )
    .await
    .unwrap();
    let have: i64 = tx
        .query_one("SELECT count(*) FROM tk_orders WHERE customer = 0", &[])
        .await
        .unwrap()
        .get(0);
    let more = (i64::from(items) - have).max(0) as i32;
    let customers = CUSTOMERS as i32 - 1;
    tx.execute(
        "INSERT INTO tk_orders (customer) SELECT c FROM generate_series(0, $1::int) c, \
         generate_series(1, $2::int) k",
        &[&customers, &more],
    )
    .await
    .unwrap();
    tx.batch_execute(
        "INSERT INTO tk_items SELECT o.id, 'sku-' || o.id || '-' || i, i \
         FROM tk_orders o, generate_series(1, 3) i WHERE NOT EXISTS \
         (SELECT 1 FROM tk_items WHERE order_id = o.id)",
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (shape, variant) = (args[1].as_str(), args[2].as_str());
    let port: u16 = args[3].parse().unwrap();
    let pg_port: u16 = args[4].parse().unwrap();
    let items: i32 = args.get(5).map_or(20, |a| a.parse().unwrap());
    if let Ok(path) = std::env::var("WHYSLOW_TRUTH") {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path);
        *TRUTH.lock().unwrap() = Some(f.unwrap());
    }
    let fixed = variant == "fixed";
    set_up(pg_port, items).await;
    // Fixed, the pool holds a connection for every client the tests run.
    let size = if shape == "fanout" && !fixed { 5 } else { 10 };
    let pool = Pool::builder(Postgres { port: pg_port })
        .max_size(size)
        .build()
        .unwrap();
    // Every connection open (and its statements prepared) before the first request.
    let mut open = Vec::new();
    for _ in 0..size {
        open.push(pool.get().await.unwrap());
    }
    drop(open);
    let app = Arc::new(App {
        pool,
        fixed,
        items,
        pages: AtomicU64::new(0),
    });
    let router = match shape {
        "nplus1" => Router::new().route("/checkout", get(checkout)),
        _ => Router::new().route("/dashboard", get(dashboard)),
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let service = router
        .with_state(app)
        .into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, service).await.unwrap();
}
