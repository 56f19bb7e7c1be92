//! `whyslow probe`: N requests, each timed phase by phase, on one reused
//! connection or on fresh ones.

use crate::connect::{connect, micros, Connected, Io};
use crate::error::{ErrorKind, ProbeError};
use crate::h1::{self, ExchangeTiming, PreparedRequest};
use crate::h2conn::H2Conn;
use crate::request::{HttpVersion, RequestSpec};
use crate::target::Target;
use crate::tls::{TlsOptions, TlsSetup};
use bytes::BytesMut;
use std::net::SocketAddr;
use std::time::Instant;
use whyslow_model::{DnsWalk, RequestPhases, TlsInfo};

#[derive(Debug, Clone)]
pub struct ProbeOptions {
    pub url: String,
    pub requests: u32,
    /// A new connection for every request (curl run N times) instead of one reused.
    pub fresh: bool,
    pub spec: RequestSpec,
    pub tls: TlsOptions,
    /// Walk the target's name as the system resolver asks it, after the
    /// requests (`dns_walk`). Off where a capture runs: the walk's queries
    /// are the prober's, not the service's.
    pub walk_dns: bool,
}

/// What a probe measured. When a request fails, the run stops and the
/// requests completed before it are kept.
#[derive(Debug, Clone, Default)]
pub struct ProbeRun {
    pub requests: Vec<RequestPhases>,
    /// The target's name walked as the system's resolver asks it, when a
    /// request looked it up (`dns_walk`).
    pub dns: Option<DnsWalk>,
    pub connections_opened: u32,
    pub error: Option<ProbeError>,
}

enum Session {
    H1 { io: Box<dyn Io>, buf: BytesMut },
    H2(H2Conn),
}

struct Open {
    session: Session,
    id: u32,
    remote: SocketAddr,
    local: SocketAddr,
    tls: Option<TlsInfo>,
}

pub async fn probe(opts: &ProbeOptions) -> ProbeRun {
    probe_until(opts, std::future::pending()).await
}

/// As `probe`, stopping early when `stop` completes (Ctrl-C): the request in
/// flight is abandoned, the completed ones are kept, and the error says so.
pub async fn probe_until(
    opts: &ProbeOptions,
    stop: impl std::future::Future<Output = ()>,
) -> ProbeRun {
    let mut run = ProbeRun::default();
    let outcome = tokio::select! {
        r = probe_into(opts, &mut run) => r,
        _ = stop => Err(ProbeError::new("run", ErrorKind::Interrupted, "stopped by the user")),
    };
    if let Err(e) = outcome {
        run.error = Some(e);
    }
    run
}

async fn probe_into(opts: &ProbeOptions, run: &mut ProbeRun) -> Result<(), ProbeError> {
    let target = Target::parse(&opts.url)?;
    let tls = match target.https {
        true => Some(TlsSetup::new(&opts.tls, opts.spec.version)?),
        false => None,
    };
    let prepared = PreparedRequest::new(&target, &opts.spec);
    let mut open: Option<Open> = None;
    for index in 0..opts.requests {
        let t0 = Instant::now();
        let mut fresh_phases = (0, 0, 0);
        let mut session_us = 0;
        let reused = open.is_some() && !opts.fresh;
        if !reused {
            let c = connect(&target, &opts.spec, tls.as_ref()).await?;
            fresh_phases = (c.dns_us, c.connect_us, c.tls_us);
            let t = Instant::now();
            open = Some(start_session(c, &opts.spec, run.connections_opened).await?);
            // The HTTP/2 preface and SETTINGS are bytes this client sends: `send`.
            session_us = micros(t.elapsed());
            run.connections_opened += 1;
        }
        let Some(conn) = open.as_mut() else {
            unreachable!("opened above")
        };
        let mut timing = match &mut conn.session {
            Session::H1 { io, buf } => {
                h1::exchange(io.as_mut(), buf, &prepared, opts.spec.timeout).await?
            }
            Session::H2(h2) => h2.exchange(&target, &opts.spec).await?,
        };
        timing.send_us += session_us;
        let total_us = micros(t0.elapsed());
        run.requests.push(phases(
            index,
            conn,
            reused,
            fresh_phases,
            &timing,
            total_us,
            &prepared,
        ));
        if !timing.keep_alive {
            open = None;
        }
    }
    // After the requests, so that their own timing is the client's alone.
    if opts.walk_dns && run.requests.iter().any(|r| r.dns_us > 0) {
        run.dns = crate::dns_walk::walk_system(&target.host).await;
    }
    Ok(())
}

async fn start_session(c: Connected, spec: &RequestSpec, id: u32) -> Result<Open, ProbeError> {
    let use_h2 = c.alpn_h2() || (c.tls.is_none() && spec.version == HttpVersion::Http2);
    let (remote, local, tls) = (c.remote, c.local, c.tls.clone());
    let session = if use_h2 {
        Session::H2(H2Conn::handshake(c.io, spec.timeout).await?)
    } else {
        Session::H1 {
            io: c.io,
            buf: BytesMut::with_capacity(16 * 1024),
        }
    };
    Ok(Open {
        session,
        id,
        remote,
        local,
        tls,
    })
}

fn phases(
    index: u32,
    conn: &Open,
    reused: bool,
    (dns_us, connect_us, tls_us): (u64, u64, u64),
    t: &ExchangeTiming,
    total_us: u64,
    prepared: &PreparedRequest,
) -> RequestPhases {
    RequestPhases {
        index,
        connection: conn.id,
        reused,
        dns_us,
        connect_us,
        tls_us,
        send_us: t.send_us,
        wait_us: t.wait_us,
        receive_us: t.receive_us,
        total_us,
        status: t.status,
        http_version: match conn.session {
            Session::H1 { .. } => "1.1".into(),
            Session::H2(_) => "2".into(),
        },
        remote: Some(conn.remote),
        local: Some(conn.local),
        request_bytes: prepared.len(),
        response_header_bytes: t.header_bytes,
        response_body_bytes: t.body_bytes,
        content_encoding: t.content_encoding.clone(),
        tls: conn.tls.clone(),
    }
}
