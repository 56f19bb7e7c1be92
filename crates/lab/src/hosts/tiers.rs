//! The services of the lab's scenarios on several hosts, each one process
//! on its host (`whyslow lab tier`): a front, an API behind it, the API's
//! database (the lab's `pgmini`), and an API of small parts. Each client
//! connection is served as a thread per connection would: its own
//! connection to the tier behind (an HTTP keep-alive session, a database
//! session), so what one host sees of a request is what the next one saw.

use crate::http1::{json_response, read_request};
use crate::pgmini::{self, shop};
use crate::pool::{Dialer, Http1Pool, Upstream};
use crate::scenario::accept_each;
use crate::truth::Calls;
use bytes::BytesMut;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_postgres::{Client, NoTls, Statement};

/// Products the API reads per summary: one at a time (the N+1), or in one
/// statement when fixed.
pub const ITEMS: i64 = 20;
/// What each statement costs in the lab's database: an index lookup on a
/// quiet server, so that the N+1's cost is its round trips.
pub const STATEMENT_US: u64 = 300;
/// Endpoints of the parts API a page calls, one after another (fixed: one
/// call that answers them all): each different, so not an N+1 of one.
pub const PARTS: &[&str] = &[
    "/user",
    "/cart",
    "/prices",
    "/stock",
    "/shipping",
    "/offers",
    "/reviews",
    "/tax",
];

/// One tier and what it calls.
#[derive(Debug, Clone, Copy)]
pub enum Tier {
    /// GET /report: one GET /summary to `api`.
    Front { api: SocketAddr },
    /// GET /page: each of `PARTS` from `api` one after another, or one
    /// GET /parts when fixed.
    Page { api: SocketAddr, fixed: bool },
    /// GET /summary: `ITEMS` products from `db`, one statement each, or one
    /// statement for all when fixed.
    Api { db: SocketAddr, fixed: bool },
    /// Any GET answered at once: the parts a page is made of.
    Parts,
    /// The lab's PostgreSQL (`pgmini`).
    Db,
}

/// `whyslow lab tier`: `kind` (calling `to`) served on `listen`, `ready`
/// told once it listens, until Ctrl-C.
pub fn run(
    kind: &str,
    listen: SocketAddr,
    to: Option<SocketAddr>,
    fixed: bool,
    ready: &mut dyn FnMut(&str),
) -> Result<(), String> {
    let tier = Tier::parse(kind, to, fixed)?;
    crate::scenario::runtime()?.block_on(async {
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        ready(&format!("ready: {kind} on {listen}"));
        tokio::select! {
            _ = serve(tier, listener) => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        Ok(())
    })
}

/// Serves `tier` on `listener` until the process ends.
pub async fn serve(tier: Tier, listener: TcpListener) {
    match tier {
        Tier::Db => pgmini::serve(listener, STATEMENT_US).await,
        _ => {
            accept_each(listener, move |tcp| async move {
                let _ = tcp.set_nodelay(true);
                let _ = connection(tier, tcp).await;
            })
            .await
        }
    }
}

/// One client connection, its requests one after another.
async fn connection(tier: Tier, mut tcp: TcpStream) -> std::io::Result<()> {
    let mut own = Own::new(tier);
    let mut buf = BytesMut::with_capacity(8192);
    while let Some(head) = read_request(&mut tcp, &mut buf, false).await? {
        let _ = buf.split_to(head.head_len + head.content_length);
        let answer = match own.answer(&head.path).await {
            Ok(body) => json_response("200 OK", &body),
            Err(e) => json_response("502 Bad Gateway", format!("{{\"error\":{e:?}}}").as_bytes()),
        };
        tcp.write_all(&answer).await?;
        if head.close {
            break;
        }
    }
    Ok(())
}

/// What one client connection holds of the tier behind.
struct Own {
    tier: Tier,
    upstream: Option<Arc<Upstream>>,
    /// The database session, its statements prepared once (as an ORM's
    /// connection does), the one-by-one and the all-at-once.
    db: Option<(Client, Statement, Statement)>,
}

type Failure = Box<dyn std::error::Error + Send + Sync>;

impl Own {
    fn new(tier: Tier) -> Own {
        let upstream = match tier {
            Tier::Front { api } | Tier::Page { api, .. } => Some(Arc::new(Upstream::Http1(
                Http1Pool::new(Dialer::plain(api), 1),
            ))),
            _ => None,
        };
        Own {
            tier,
            upstream,
            db: None,
        }
    }

    async fn answer(&mut self, path: &str) -> Result<Vec<u8>, Failure> {
        match self.tier {
            Tier::Front { .. } => {
                self.call("/summary").await?;
                Ok(b"{\"report\":true}\n".to_vec())
            }
            Tier::Page { fixed: true, .. } => {
                self.call("/parts").await?;
                Ok(b"{\"page\":true}\n".to_vec())
            }
            Tier::Page { fixed: false, .. } => {
                for part in PARTS {
                    self.call(part).await?;
                }
                Ok(b"{\"page\":true}\n".to_vec())
            }
            Tier::Api { db, fixed } => self.summary(db, fixed).await,
            Tier::Parts | Tier::Db => Ok(format!("{{\"part\":{path:?}}}\n").into_bytes()),
        }
    }

    async fn call(&self, path: &str) -> Result<(), Failure> {
        let upstream = self.upstream.as_ref().ok_or("no upstream")?;
        Ok(upstream.call(path, None, &Calls::none()).await?)
    }

    async fn summary(&mut self, db: SocketAddr, fixed: bool) -> Result<Vec<u8>, Failure> {
        if self.db.is_none() {
            let tcp = TcpStream::connect(db).await?;
            tcp.set_nodelay(true)?;
            let mut config = tokio_postgres::Config::new();
            config.user("postgres").dbname("postgres");
            let (client, connection) = config.connect_raw(tcp, NoTls).await?;
            tokio::spawn(connection);
            let one = client.prepare(shop::PRODUCT).await?;
            let all = client.prepare(shop::PRODUCTS).await?;
            self.db = Some((client, one, all));
        }
        let (client, one, all) = self.db.as_ref().expect("connected above");
        let ids: Vec<i64> = (1..=ITEMS).collect();
        let rows = match fixed {
            true => client.query(all, &[&ids]).await?.len(),
            false => {
                let mut n = 0;
                for id in &ids {
                    n += client.query(one, &[id]).await?.len();
                }
                n
            }
        };
        Ok(format!("{{\"products\":{rows}}}\n").into_bytes())
    }
}

impl Tier {
    /// Its name, and the address it calls, as `whyslow lab tier` takes them.
    pub fn args(&self) -> Vec<String> {
        let (kind, to, fixed) = match *self {
            Tier::Front { api } => ("front", Some(api), false),
            Tier::Page { api, fixed } => ("page", Some(api), fixed),
            Tier::Api { db, fixed } => ("api", Some(db), fixed),
            Tier::Parts => ("parts", None, false),
            Tier::Db => ("db", None, false),
        };
        let mut out = vec![kind.to_string()];
        out.extend(to.map(|a| format!("--to={a}")));
        out.extend(fixed.then(|| "--fixed".to_string()));
        out
    }

    /// The tier `kind` calling `to`. Err: an unknown kind, or one that
    /// calls nothing given.
    pub fn parse(kind: &str, to: Option<SocketAddr>, fixed: bool) -> Result<Tier, String> {
        let needs = |to: Option<SocketAddr>| to.ok_or_else(|| format!("tier {kind} needs --to"));
        Ok(match kind {
            "front" => Tier::Front { api: needs(to)? },
            "page" => Tier::Page {
                api: needs(to)?,
                fixed,
            },
            "api" => Tier::Api {
                db: needs(to)?,
                fixed,
            },
            "parts" => Tier::Parts,
            "db" => Tier::Db,
            _ => return Err(format!("no tier {kind:?} (front, page, api, parts, db)")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tier_reads_back_from_its_arguments() {
        let to = "10.0.0.2:8080".parse().unwrap();
        for tier in [
            Tier::Front { api: to },
            Tier::Page {
                api: to,
                fixed: true,
            },
            Tier::Api {
                db: to,
                fixed: false,
            },
            Tier::Parts,
            Tier::Db,
        ] {
            let args = tier.args();
            let fixed = args.iter().any(|a| a == "--fixed");
            let to = args
                .iter()
                .find_map(|a| a.strip_prefix("--to="))
                .map(|a| a.parse().unwrap());
            let back = Tier::parse(&args[0], to, fixed).unwrap();
            assert_eq!(format!("{back:?}"), format!("{tier:?}"));
        }
        assert!(Tier::parse("api", None, false).is_err());
        assert!(Tier::parse("cache", None, false).is_err());
    }
}
