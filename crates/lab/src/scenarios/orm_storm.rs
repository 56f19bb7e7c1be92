//! Case 003 (a payment service at 39 transactions/s): each request sent
//! 177 SQL statements — an ORM loading rows one at a time, and re-reading
//! data that never changed. Here a checkout loads the customer's orders,
//! then lazily each order's items and each item's product, and re-reads the
//! tax rate per order: 101 statements. Fixed: three statements with `IN`
//! lists (`= ANY($1)`) and the rate read once and kept in the process.
//!
//! The app is a real PostgreSQL client (tokio-postgres, extended protocol,
//! statements prepared once per connection). Its database is the lab's own
//! (`pgmini`), or a real PostgreSQL given to `start_with_database`.
//! `orm-storm-mysql` is the same checkout on MySQL's protocol: the lab's
//! MySQL client (`mymini::client`, the binary protocol, each text prepared
//! once per connection) over the lab's MySQL server (`mymini`) or a real
//! MariaDB given to `start_with_mysql`.

use crate::http1::{json_response, read_request};
use crate::mymini;
use crate::pgmini::shop::Value;
use crate::pgmini::{self, shop};
use crate::scenario::{accept_each, listen, BoxedStart, Fact, Holding, Running, Scenario, Truth};
use crate::truth::{CallLog, Calls};
use bytes::BytesMut;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OnceCell, Semaphore, SemaphorePermit};
use tokio_postgres::{Client, NoTls, Statement};
use whyslow_model::FindingKind;

/// What each statement costs in the lab's database: an index lookup on a
/// busy server across a network (case 003's 177 statements took 3.7 s,
/// 21 ms each; a quiet local PostgreSQL answers in 0.1 ms). Large enough
/// that the lab's own per-statement overhead (~0.2 ms) stays small beside it.
pub const STATEMENT_US: u64 = 2_000;
/// Connections of the app's pool: capacity is about POOL / (statements ×
/// STATEMENT_US) checkouts a second — 8 / (101 × 2 ms) ≈ 40/s broken, the
/// case's 39.
pub const POOL: usize = 8;
/// Statements per broken checkout: the orders, the items of each order,
/// the product of each item, the tax rate per order.
pub const BROKEN_STATEMENTS: u64 =
    (1 + 2 * shop::ORDERS + shop::ORDERS * shop::ITEMS_PER_ORDER) as u64;
/// Products loaded one at a time: the biggest N+1.
const PRODUCT_LOADS: u64 = (shop::ORDERS * shop::ITEMS_PER_ORDER) as u64;

const PATH: &str = "/checkout";

pub const SCENARIO: Scenario = Scenario {
    name: "orm-storm",
    case: "003",
    summary: "a checkout sends 101 SQL statements: lazy loads and a re-read tax rate",
    broken: "orders, then each order's items, each item's product, the tax rate per order",
    fixed: "3 statements with IN lists; the tax rate read once and kept",
    method: "GET",
    path: PATH,
    body: "",
    truth: Truth {
        kind: Some(FindingKind::NPlusOne),
        // One batched statement instead of the products' 60.
        time_lost_us: (PRODUCT_LOADS - 1) * STATEMENT_US,
        facts: &[
            Fact {
                name: "statements",
                value: BROKEN_STATEMENTS,
            },
            Fact {
                name: "product_loads",
                value: PRODUCT_LOADS,
            },
            Fact {
                name: "item_loads",
                value: shop::ORDERS as u64,
            },
            Fact {
                name: "tax_reads",
                value: shop::ORDERS as u64,
            },
            Fact {
                name: "fixed_statements",
                value: 3,
            },
            // What one statement costs in the lab's database.
            Fact {
                name: "statement_us",
                value: STATEMENT_US,
            },
        ],
    },
    load: None,
    fixed_under_load: &[FindingKind::PoolQueueing],
    holds: Holding::Request,
    start: boxed,
    tls: None,
};

/// Case 003 on MySQL's protocol: the same shop, checkout and truth.
pub const MYSQL_SCENARIO: Scenario = Scenario {
    name: "orm-storm-mysql",
    summary: "orm-storm on MySQL: 101 SQL statements per checkout, prepared statements",
    start: boxed_mysql,
    ..SCENARIO
};

/// Which database the app's pool speaks to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Db {
    Postgres,
    Mysql,
}

/// A user with no password, and the database the shop is in, on a real MySQL.
pub const MYSQL_USER: &str = "lab";
pub const MYSQL_DATABASE: &str = "shop";

/// One pooled connection: its statements prepared, by the SQL they run.
struct Prepared {
    conn: Conn,
    /// Local port of its connection.
    port: u16,
}

enum Conn {
    Postgres {
        client: Client,
        statements: Vec<(&'static str, Statement)>,
    },
    /// Held by one checkout at a time; the lock is never contended.
    Mysql(tokio::sync::Mutex<mymini::client::Client>),
}

/// One checkout's statements: prepared once per connection, or — when the
/// request's trace is sampled — each text with a sqlcommenter comment that
/// carries it, as an instrumented ORM sends them (prepared per request, the
/// comment differing per trace).
struct Session<'a> {
    db: &'a Prepared,
    traceparent: Option<&'a str>,
    truth: &'a Calls,
}

impl Session<'_> {
    /// The rows of shop statement `sql` with `params`.
    async fn query(&self, sql: &'static str, params: &[Value]) -> Result<Vec<Vec<Value>>, DbError> {
        let call = self.truth.start(self.db.port);
        let rows = match &self.db.conn {
            Conn::Postgres { client, statements } => {
                pg_query(client, statements, sql, params, self.traceparent).await
            }
            Conn::Mysql(client) => {
                let mut client = client.lock().await;
                my_query(&mut client, sql, params, self.traceparent).await
            }
        };
        call.done();
        rows
    }
}

async fn pg_query(
    client: &Client,
    statements: &[(&'static str, Statement)],
    sql: &'static str,
    params: &[Value],
    traceparent: Option<&str>,
) -> Result<Vec<Vec<Value>>, DbError> {
    let args: Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>> = params
        .iter()
        .map(|v| -> Box<dyn tokio_postgres::types::ToSql + Sync + Send> {
            match v {
                Value::Int(i) => Box::new(*i),
                Value::Text(t) => Box::new(t.clone()),
                Value::Ints(v) => Box::new(v.clone()),
            }
        })
        .collect();
    let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = args
        .iter()
        .map(|a| a.as_ref() as &(dyn tokio_postgres::types::ToSql + Sync))
        .collect();
    let rows = match traceparent {
        None => {
            let s = &statements
                .iter()
                .find(|s| s.0 == sql)
                .ok_or("not prepared")?
                .1;
            client.query(s, &refs).await?
        }
        Some(t) => {
            let text = format!("{sql} /*traceparent='{t}'*/");
            client.query(text.as_str(), &refs).await?
        }
    };
    let columns = shop::STATEMENTS
        .iter()
        .find(|s| s.sql == sql)
        .map_or(&[][..], |s| s.columns);
    Ok(rows
        .iter()
        .map(|r| {
            columns
                .iter()
                .enumerate()
                .map(|(i, &(_, oid))| match oid {
                    shop::INT8 => Value::Int(r.get(i)),
                    _ => Value::Text(r.get(i)),
                })
                .collect()
        })
        .collect())
}

/// A list parameter goes as one `?` per value (MySQL has no arrays).
async fn my_query(
    client: &mut mymini::client::Client,
    sql: &'static str,
    params: &[Value],
    traceparent: Option<&str>,
) -> Result<Vec<Vec<Value>>, DbError> {
    let (text, flat) = match params {
        [Value::Ints(v)] => (
            shop::mysql_text(sql, v.len()),
            v.iter().map(|&i| Value::Int(i)).collect(),
        ),
        _ => (shop::mysql_text(sql, 0), params.to_vec()),
    };
    Ok(match traceparent {
        None => client.execute(&text, &flat).await?,
        // A text that differs per request is not prepared: its values go
        // in it, as an ORM that comments its statements sends them.
        Some(t) => {
            let text = format!("{} /*traceparent='{t}'*/", with_literals(&text, &flat));
            client.query_rows(&text).await?
        }
    })
}

/// `text` with each `?` replaced by its value, strings quoted.
fn with_literals(text: &str, params: &[Value]) -> String {
    let mut values = params.iter();
    let mut out = String::with_capacity(text.len() + 8 * params.len());
    for c in text.chars() {
        match (c, values.clone().next()) {
            ('?', Some(v)) => {
                values.next();
                match v {
                    Value::Int(i) => out.push_str(&i.to_string()),
                    Value::Text(t) => out.push_str(&format!("'{}'", t.replace('\'', "''"))),
                    Value::Ints(_) => out.push_str("NULL"),
                }
            }
            _ => out.push(c),
        }
    }
    out
}

fn int(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::Int(i)) => *i,
        _ => 0,
    }
}

/// The request's `traceparent` when it asks for sampling (flags bit 0):
/// sqlcommenter comments only the statements of sampled traces.
fn sampled(traceparent: Option<&str>) -> Option<&str> {
    let flags = traceparent?.rsplit('-').next()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    (flags & 1 == 1).then_some(traceparent?)
}

/// A pool of POOL connections, each opened and prepared on first use (so a
/// capture started before the first checkout sees every statement's text).
/// A checkout holds one connection for its whole work, as an ORM's session
/// does; under more concurrent checkouts than connections, the rest wait.
struct Database {
    kind: Db,
    addr: SocketAddr,
    slots: Vec<OnceCell<Prepared>>,
    /// Slots no checkout holds, and a permit per one of them.
    idle: std::sync::Mutex<Vec<usize>>,
    free: Semaphore,
    /// The fixed app's tax rate, read at start-up; None: the broken app
    /// reads it per order.
    rate: Option<i64>,
    truth: Arc<CallLog>,
}

type DbError = Box<dyn std::error::Error + Send + Sync>;

async fn connect(addr: SocketAddr) -> Result<Client, DbError> {
    Ok(connect_from(TcpStream::connect(addr).await?).await?)
}

async fn connect_mysql(addr: SocketAddr) -> std::io::Result<mymini::client::Client> {
    let tcp = TcpStream::connect(addr).await?;
    mymini::client::Client::connect_from(tcp, MYSQL_USER, MYSQL_DATABASE).await
}

/// A client over a connection already open (whose local port the caller knows).
async fn connect_from(tcp: TcpStream) -> Result<Client, tokio_postgres::Error> {
    let mut config = tokio_postgres::Config::new();
    config.user("postgres").dbname("postgres");
    let (client, connection) = config.connect_raw(tcp, NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// One checkout's hold on a connection; gives it back when dropped.
struct Held<'a> {
    db: &'a Database,
    slot: usize,
    _permit: SemaphorePermit<'a>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // Back in the idle list before the permit (a field) is released.
        if let Ok(mut idle) = self.db.idle.lock() {
            idle.push(self.slot);
        }
    }
}

impl Database {
    /// A connection of its own for one checkout, opened on first use (a
    /// call of the checkout's, in `truth`).
    async fn checkout(&self, truth: &Calls) -> Result<(Held<'_>, &Prepared), DbError> {
        let permit = self.free.acquire().await?;
        let slot = self.idle.lock().ok().and_then(|mut i| i.pop());
        let held = Held {
            db: self,
            slot: slot.ok_or("no idle connection under a permit")?,
            _permit: permit,
        };
        let prepared = self.slots[held.slot]
            .get_or_try_init(|| async {
                let tcp = TcpStream::connect(self.addr).await?;
                let port = tcp.local_addr()?.port();
                let call = truth.start(port);
                let conn = match self.kind {
                    Db::Postgres => {
                        let client = connect_from(tcp).await?;
                        let mut statements = Vec::new();
                        for s in shop::STATEMENTS {
                            statements.push((s.sql, client.prepare(s.sql).await?));
                        }
                        Conn::Postgres { client, statements }
                    }
                    // Each text is prepared at its first use (a list's
                    // length is known only then).
                    Db::Mysql => {
                        let client =
                            mymini::client::Client::connect_from(tcp, MYSQL_USER, MYSQL_DATABASE)
                                .await?;
                        Conn::Mysql(tokio::sync::Mutex::new(client))
                    }
                };
                call.done();
                Ok::<_, DbError>(Prepared { conn, port })
            })
            .await?;
        Ok((held, prepared))
    }
}

/// The broken checkout: lazy loads, one statement per row, and the rate per order.
async fn checkout_lazy(c: &Session<'_>) -> Result<i64, DbError> {
    let (mut total, mut rate) = (0, 0);
    let customer = [Value::Int(shop::CUSTOMER)];
    for order in c.query(shop::ORDERS_OF_CUSTOMER, &customer).await? {
        let order = Value::Int(int(order.first()));
        for item in c.query(shop::ITEMS_OF_ORDER, &[order]).await? {
            let (product, quantity) = (int(item.get(1)), int(item.get(2)));
            for p in c.query(shop::PRODUCT, &[Value::Int(product)]).await? {
                total += quantity * int(p.get(2));
            }
        }
        let region = [Value::Text(shop::REGION.into())];
        let rows = c.query(shop::TAX_RATE, &region).await?;
        rate = int(rows.first().ok_or("no tax rate")?.first());
    }
    Ok(total + total * rate / 10_000)
}

/// The fixed checkout: the orders, their items and their products in three
/// statements; the rate from memory.
async fn checkout_batched(c: &Session<'_>, rate: i64) -> Result<i64, DbError> {
    let orders: Vec<i64> = c
        .query(shop::ORDERS_OF_CUSTOMER, &[Value::Int(shop::CUSTOMER)])
        .await?
        .iter()
        .map(|r| int(r.first()))
        .collect();
    let items = c
        .query(shop::ITEMS_OF_ORDERS, &[Value::Ints(orders)])
        .await?;
    let mut ids: Vec<i64> = items.iter().map(|r| int(r.get(1))).collect();
    // One placeholder per distinct product: the same text every checkout.
    ids.sort_unstable();
    ids.dedup();
    let prices: std::collections::HashMap<i64, i64> = c
        .query(shop::PRODUCTS, &[Value::Ints(ids)])
        .await?
        .iter()
        .map(|r| (int(r.first()), int(r.get(2))))
        .collect();
    let sum: i64 = items
        .iter()
        .map(|r| int(r.get(2)) * prices.get(&int(r.get(1))).copied().unwrap_or(0))
        .sum();
    Ok(sum + sum * rate / 10_000)
}

async fn checkout(db: &Database, traceparent: Option<&str>, truth: &Calls) -> Result<i64, DbError> {
    let (_held, conn) = db.checkout(truth).await?;
    let session = Session {
        db: conn,
        traceparent: sampled(traceparent),
        truth,
    };
    match db.rate {
        Some(rate) => checkout_batched(&session, rate).await,
        None => checkout_lazy(&session).await,
    }
}

/// The fixed app reads the tax rate once at start-up, on a connection of
/// its own that it closes.
async fn read_rate(kind: Db, db: SocketAddr) -> Result<i64, DbError> {
    if kind == Db::Mysql {
        let mut client = connect_mysql(db).await?;
        let region = [Value::Text(shop::REGION.into())];
        let rows = client
            .execute(&shop::mysql_text(shop::TAX_RATE, 0), &region)
            .await?;
        return Ok(int(rows.first().and_then(|r| r.first())));
    }
    let client = connect(db).await?;
    let row = client.query_one(shop::TAX_RATE, &[&shop::REGION]).await?;
    Ok(row.get(0))
}

async fn front(mut stream: TcpStream, db: Arc<Database>) {
    let _ = stream.set_nodelay(true);
    let peer = stream.peer_addr().map_or(0, |a| a.port());
    let mut buf = BytesMut::with_capacity(4096);
    while let Ok(Some(head)) = read_request(&mut stream, &mut buf, false).await {
        let _ = buf.split_to(head.head_len + head.content_length);
        let truth = db.truth.request(peer);
        let (status, body) = match checkout(&db, head.traceparent.as_deref(), &truth).await {
            Ok(total) => ("200 OK", format!("{{\"total\":{total}}}\n")),
            Err(e) => (
                "500 Internal Server Error",
                format!("{{\"error\":\"{e}\"}}\n"),
            ),
        };
        let out = json_response(status, body.as_bytes());
        let sent = stream.write_all(&out).await;
        truth.served();
        if sent.is_err() || head.close {
            return;
        }
    }
}

async fn serve_front(listener: TcpListener, db: Arc<Database>) {
    accept_each(listener, |stream| front(stream, db.clone())).await;
}

/// The checkout over the database at `db` (the lab's own, or a real
/// PostgreSQL whose shop tables `create_shop` made).
async fn start_front(
    fixed: bool,
    kind: Db,
    db: SocketAddr,
    mut tasks: Vec<tokio::task::JoinHandle<()>>,
) -> std::io::Result<Running> {
    let (front_l, addr) = listen().await?;
    let database = Arc::new(Database {
        kind,
        addr: db,
        slots: (0..POOL).map(|_| OnceCell::new()).collect(),
        idle: std::sync::Mutex::new((0..POOL).rev().collect()),
        free: Semaphore::new(POOL),
        rate: match fixed {
            true => Some(read_rate(kind, db).await.map_err(std::io::Error::other)?),
            false => None,
        },
        truth: CallLog::new(),
    });
    let truth = database.truth.clone();
    tasks.insert(0, tokio::spawn(serve_front(front_l, database)));
    Ok(Running::new(
        format!("http://{addr}{PATH}"),
        vec![addr.port(), db.port()],
        tasks,
    )
    .with_truth(truth))
}

/// Creates the shop's tables and rows in a real PostgreSQL (user postgres,
/// trust auth), then closes the connection.
pub async fn create_shop(db: SocketAddr) -> std::io::Result<()> {
    let client = connect(db).await.map_err(std::io::Error::other)?;
    client
        .batch_execute(&shop::setup_sql())
        .await
        .map_err(std::io::Error::other)
}

/// The scenario over a real PostgreSQL at `db` that `create_shop` filled.
pub async fn start_with_database(fixed: bool, db: SocketAddr) -> std::io::Result<Running> {
    start_front(fixed, Db::Postgres, db, Vec::new()).await
}

/// Creates the shop's tables and rows in a real MySQL or MariaDB (user
/// `MYSQL_USER` with no password, database `MYSQL_DATABASE`).
pub async fn create_shop_mysql(db: SocketAddr) -> std::io::Result<()> {
    let mut client = connect_mysql(db).await?;
    for sql in shop::mysql_setup() {
        client.query(&sql).await?;
    }
    Ok(())
}

/// `orm-storm-mysql` over a real MySQL or MariaDB that `create_shop_mysql` filled.
pub async fn start_with_mysql(fixed: bool, db: SocketAddr) -> std::io::Result<Running> {
    start_front(fixed, Db::Mysql, db, Vec::new()).await
}

async fn start(fixed: bool) -> std::io::Result<Running> {
    let (db_l, db) = listen().await?;
    let db_task = tokio::spawn(pgmini::serve(db_l, STATEMENT_US));
    start_front(fixed, Db::Postgres, db, vec![db_task]).await
}

async fn start_mysql(fixed: bool) -> std::io::Result<Running> {
    let (db_l, db) = listen().await?;
    let db_task = tokio::spawn(mymini::serve(db_l, STATEMENT_US));
    start_front(fixed, Db::Mysql, db, vec![db_task]).await
}

fn boxed(fixed: bool) -> BoxedStart {
    Box::pin(start(fixed))
}

fn boxed_mysql(fixed: bool) -> BoxedStart {
    Box::pin(start_mysql(fixed))
}
