//! One span as the analysis needs it, whatever encoding it came in: ids,
//! kind, times, its service, and what the semantic conventions (old names
//! and new) say about the call — protocol, peer, normalized request, the
//! parameters' digest. Values are read here and dropped: nothing of a
//! literal, a body or a header leaves this module.

use smol_str::SmolStr;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use whyslow_model::{Protocol, Status};
use whyslow_proto::digest::ParamDigest;
use whyslow_proto::http1::request_label_digest;
use whyslow_proto::normalize;

/// OTLP's `Span.SpanKind`.
pub mod kind {
    pub const INTERNAL: i32 = 1;
    pub const SERVER: i32 = 2;
    pub const CLIENT: i32 = 3;
    pub const PRODUCER: i32 = 4;
}

/// An attribute value, as both encodings carry it.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(String),
    Int(i64),
    Bool(bool),
    Double(f64),
    /// Arrays, maps and bytes: kept only as "present".
    Other,
}

impl AttrValue {
    fn as_str(&self) -> Option<&str> {
        match self {
            AttrValue::Str(s) => Some(s),
            _ => None,
        }
    }

    fn as_int(&self) -> Option<i64> {
        match self {
            AttrValue::Int(n) => Some(*n),
            AttrValue::Str(s) => s.parse().ok(),
            AttrValue::Double(d) if d.fract() == 0.0 => Some(*d as i64),
            _ => None,
        }
    }
}

/// Attribute values longer than this are cut before they are read: a
/// statement of megabytes says no more about its shape than its start.
pub const MAX_ATTRIBUTE_BYTES: usize = 64 * 1024;

/// A span as decoded, before its attributes are read.
#[derive(Debug, Clone, Default)]
pub struct RawSpan {
    pub trace_id: u128,
    pub span_id: u64,
    pub parent_span_id: u64,
    pub name: String,
    pub kind: i32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attributes: Vec<(String, AttrValue)>,
    /// OTLP status code 2: the span failed.
    pub error: bool,
}

/// A call or request as a span tells it.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanRecord {
    pub trace_id: u128,
    pub span_id: u64,
    pub parent_span_id: u64,
    pub kind: i32,
    /// Index into `SpanSet::services`.
    pub service: u32,
    pub start_us: u64,
    pub end_us: u64,
    pub protocol: Protocol,
    pub request: SmolStr,
    pub peer: Option<SocketAddr>,
    pub params_digest: Option<u64>,
    pub params_unknown: bool,
    pub status: Option<Status>,
    /// The name the span gave its peer when that was not an address.
    pub peer_name: Option<SmolStr>,
    /// A client span's own port (`network.local.port`): its connection.
    pub local_port: Option<u16>,
    /// Written by whyslow from the wire: the span's times are the
    /// exchange's on the wire (sent to answered), not a client's own.
    pub wire: bool,
    /// whyslow's attribution said its parent was a guess
    /// (`whyslow.attribution` inferred or ambiguous).
    pub parent_guessed: bool,
}

/// Reads what `raw` says into a record of service `service`.
pub fn record(raw: &RawSpan, service: u32) -> SpanRecord {
    let attr = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| raw.attributes.iter().find(|(n, _)| n == k).map(|(_, v)| v))
    };
    let text = |keys: &[&str]| attr(keys).and_then(AttrValue::as_str);
    let int = |keys: &[&str]| attr(keys).and_then(AttrValue::as_int);
    let mut digest = ParamDigest::new();
    let mut params_unknown = false;
    let db_system = text(&["db.system.name", "db.system"]);
    let method = text(&["http.request.method", "http.method"]);
    let (protocol, request) = if let Some(system) = db_system {
        let statement = text(&["db.query.text", "db.statement"]).unwrap_or(&raw.name);
        let (protocol, request) = db_request(system, statement, &mut digest);
        params_unknown = digest.is_empty() && has_placeholder(&request);
        (protocol, request)
    } else if let Some(method) = method {
        let target = text(&["url.path", "http.target"])
            .map(str::to_string)
            .or_else(|| text(&["url.full", "http.url"]).map(path_of))
            .or_else(|| raw.name.split_once(' ').map(|(_, p)| p.to_string()))
            .unwrap_or_else(|| "/".into());
        let h2 = text(&["network.protocol.version", "http.flavor"]) == Some("2");
        let protocol = if h2 { Protocol::Http2 } else { Protocol::Http1 };
        (protocol, request_label_digest(method, &target, &mut digest))
    } else if let Some(name) = text(&["dns.question.name"]) {
        // OpenTelemetry's DNS conventions: a lookup's query, labelled as
        // the wire labels it ("A api.internal").
        let qtype = text(&["dns.question.type"]).unwrap_or("A");
        let name = cut_to(name, MAX_ATTRIBUTE_BYTES);
        (
            Protocol::Dns,
            format!("{qtype} {}", name.to_ascii_lowercase()),
        )
    } else if text(&["rpc.system"]).is_some() {
        let path = format!(
            "/{}/{}",
            text(&["rpc.service"]).unwrap_or("?"),
            text(&["rpc.method"]).unwrap_or("?")
        );
        (
            Protocol::Http2,
            request_label_digest("POST", &path, &mut digest),
        )
    } else {
        (
            Protocol::Unknown,
            normalize::key(raw.name.as_bytes(), &mut digest),
        )
    };
    // Spans whyslow wrote carry the wire's digest: repeats stay told apart.
    let (digest, params_unknown) =
        match text(&["whyslow.params.digest"]).and_then(|d| u64::from_str_radix(d, 16).ok()) {
            Some(d) => (Some(d), false),
            None => (
                (!digest.is_empty()).then(|| digest.finish()),
                params_unknown,
            ),
        };
    let peer = if raw.kind == kind::SERVER {
        // A server span's own address; its `net.peer.*` is the client.
        let host = text(&["server.address", "net.host.name"]).map(str::to_string);
        (host, int(&["server.port", "net.host.port"]))
    } else {
        attr_peer(&text, &int)
    };
    let mut out = finish(
        raw,
        service,
        protocol,
        request,
        digest,
        params_unknown,
        &peer,
    );
    out.parent_guessed = matches!(
        text(&["whyslow.attribution"]),
        Some("inferred" | "ambiguous")
    );
    if raw.kind == kind::CLIENT {
        out.local_port = int(&["network.local.port"]).and_then(|p| u16::try_from(p).ok());
    }
    let code = int(&["http.response.status_code", "http.status_code"]);
    out.status = code.and_then(|c| u16::try_from(c).ok()).map(Status::Http);
    out
}

/// The peer as the span names it: (address or name, port).
type Peer = (Option<String>, Option<i64>);

fn attr_peer<'a>(
    text: &impl Fn(&[&str]) -> Option<&'a str>,
    int: &impl Fn(&[&str]) -> Option<i64>,
) -> Peer {
    let host = text(&[
        "server.address",
        "net.peer.name",
        "net.peer.ip",
        "network.peer.address",
        "net.sock.peer.addr",
    ])
    .map(str::to_string)
    .or_else(|| text(&["url.full", "http.url"]).and_then(host_of));
    let port = int(&[
        "server.port",
        "net.peer.port",
        "network.peer.port",
        "net.sock.peer.port",
    ])
    .or_else(|| {
        text(&["url.full", "http.url"])
            .and_then(host_port_of)
            .and_then(|p| p.parse().ok())
    });
    (host, port)
}

fn finish(
    raw: &RawSpan,
    service: u32,
    protocol: Protocol,
    request: String,
    params_digest: Option<u64>,
    params_unknown: bool,
    peer: &Peer,
) -> SpanRecord {
    let (peer, peer_name) = peer_address(peer, protocol);
    SpanRecord {
        trace_id: raw.trace_id,
        span_id: raw.span_id,
        parent_span_id: raw.parent_span_id,
        kind: raw.kind,
        service,
        start_us: raw.start_ns / 1000,
        end_us: (raw.end_ns / 1000).max(raw.start_ns / 1000),
        protocol,
        request: request.into(),
        peer,
        params_digest,
        params_unknown,
        status: None,
        peer_name,
        local_port: None,
        wire: false,
        parent_guessed: false,
    }
}

/// The peer as an address: an IP as given, `localhost` as loopback, any
/// other name as a stand-in address in 240.0.0.0/4 (reserved, never a
/// real peer) derived from the name, which is kept beside it.
fn peer_address(peer: &Peer, protocol: Protocol) -> (Option<SocketAddr>, Option<SmolStr>) {
    let (host, port) = peer;
    let Some(host) = host.as_deref() else {
        return (None, None);
    };
    let port = port
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or_else(|| default_port(protocol));
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<IpAddr>() {
        return (Some(SocketAddr::new(ip, port)), None);
    }
    if host.eq_ignore_ascii_case("localhost") {
        return (
            Some(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)),
            None,
        );
    }
    let h = host.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let ip = Ipv4Addr::from(0xf000_0000 | (h as u32 & 0x0fff_ffff));
    (Some(SocketAddr::new(ip.into(), port)), Some(host.into()))
}

/// The port a protocol's servers listen on by default.
pub(crate) fn default_port(protocol: Protocol) -> u16 {
    match protocol {
        Protocol::Postgres => 5432,
        Protocol::Mysql => 3306,
        Protocol::Redis => 6379,
        Protocol::Memcached => 11211,
        Protocol::Dns => 53,
        _ => 80,
    }
}

/// "host:port" of a URL, without credentials.
fn authority(url: &str) -> Option<&str> {
    let rest = &url[url.find("://")? + 3..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let auth = &rest[..end];
    Some(auth.rsplit_once('@').map_or(auth, |(_, a)| a))
}

fn host_of(url: &str) -> Option<String> {
    let a = authority(url)?;
    if a.starts_with('[') {
        return a.find(']').map(|i| a[1..i].to_string());
    }
    Some(a.split(':').next().unwrap_or(a).to_string())
}

fn host_port_of(url: &str) -> Option<&str> {
    let a = authority(url)?;
    let after = a.rfind(']').map_or(a, |i| &a[i..]);
    after.rsplit_once(':').map(|(_, p)| p)
}

fn path_of(url: &str) -> String {
    match url.find("://") {
        Some(i) => {
            let rest = &url[i + 3..];
            rest.find('/').map_or("/".into(), |j| rest[j..].to_string())
        }
        None => url.to_string(),
    }
}

/// A database call's protocol and normalized request.
fn db_request(system: &str, statement: &str, digest: &mut ParamDigest) -> (Protocol, String) {
    let cut = cut_to(statement, MAX_ATTRIBUTE_BYTES);
    match system {
        "redis" | "memcached" => {
            let protocol = if system == "redis" {
                Protocol::Redis
            } else {
                Protocol::Memcached
            };
            let mut words = cut.split_whitespace();
            let command = words.next().unwrap_or("?").to_uppercase();
            let request = match words.next() {
                Some(key) => format!("{command} {}", normalize::key(key.as_bytes(), digest)),
                None => command,
            };
            // Values after the key are never read.
            for w in words {
                digest.add(w.as_bytes());
            }
            (protocol, request)
        }
        "postgresql" | "postgres" => (Protocol::Postgres, normalize::sql(cut, digest)),
        "mysql" | "mariadb" => (Protocol::Mysql, normalize::mysql(cut, digest)),
        _ => (Protocol::Unknown, normalize::sql(cut, digest)),
    }
}

/// `s` cut to at most `max` bytes, on a char boundary.
pub(crate) fn cut_to(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let end = (0..=max)
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0);
    &s[..end]
}

/// Whether a normalized statement has bind parameters (`?`, `$1`, `%s`,
/// `%(name)s`, `:name`): its values are elsewhere, not in the span.
fn has_placeholder(text: &str) -> bool {
    let b = text.as_bytes();
    b.iter().enumerate().any(|(i, &c)| {
        let next = b.get(i + 1).copied().unwrap_or(0);
        let prev = if i > 0 { b[i - 1] } else { b' ' };
        match c {
            b'?' => true,
            b'$' => next.is_ascii_digit(),
            b'%' => next == b's' || next == b'(',
            b':' => prev != b':' && next != b':' && next.is_ascii_alphabetic(),
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(kind: i32, attrs: &[(&str, AttrValue)]) -> RawSpan {
        RawSpan {
            trace_id: 1,
            span_id: 2,
            kind,
            name: "span".into(),
            start_ns: 1_000_000,
            end_ns: 3_000_000,
            attributes: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            ..Default::default()
        }
    }

    fn s(v: &str) -> AttrValue {
        AttrValue::Str(v.into())
    }

    #[test]
    fn old_and_new_names_read_the_same() {
        let old = record(
            &raw(
                kind::CLIENT,
                &[
                    ("db.system", s("postgresql")),
                    ("db.statement", s("SELECT * FROM t WHERE id = 42")),
                    ("net.peer.name", s("127.0.0.1")),
                    ("net.peer.port", AttrValue::Int(5433)),
                ],
            ),
            0,
        );
        let new = record(
            &raw(
                kind::CLIENT,
                &[
                    ("db.system.name", s("postgresql")),
                    ("db.query.text", s("SELECT * FROM t WHERE id = 42")),
                    ("server.address", s("127.0.0.1")),
                    ("server.port", AttrValue::Int(5433)),
                ],
            ),
            0,
        );
        assert_eq!(old, new);
        assert_eq!(new.request, "SELECT * FROM t WHERE id = ?");
        assert_eq!(new.protocol, Protocol::Postgres);
        assert_eq!(new.peer, Some("127.0.0.1:5433".parse().unwrap()));
        assert!(new.params_digest.is_some() && !new.params_unknown);
        assert_eq!((new.start_us, new.end_us), (1_000, 3_000));
    }

    #[test]
    fn placeholders_without_values_leave_the_parameters_unknown() {
        let r = record(
            &raw(
                kind::CLIENT,
                &[
                    ("db.system", s("postgresql")),
                    (
                        "db.statement",
                        s("SELECT * FROM items WHERE %(param_1)s = items.order_id"),
                    ),
                ],
            ),
            0,
        );
        assert!(r.params_unknown && r.params_digest.is_none());
        assert_eq!(r.peer, None);
        let plain = record(
            &raw(
                kind::CLIENT,
                &[
                    ("db.system", s("postgresql")),
                    ("db.statement", s("SELECT 1")),
                ],
            ),
            0,
        );
        assert!(!plain.params_unknown, "{plain:?}");
    }

    #[test]
    fn http_calls_from_a_url_keep_no_query_and_no_credentials() {
        let r = record(
            &raw(
                kind::CLIENT,
                &[
                    ("http.method", s("GET")),
                    (
                        "http.url",
                        s("http://user:pw@api.internal:8080/data/7?token=secret"),
                    ),
                    ("http.status_code", AttrValue::Int(200)),
                ],
            ),
            0,
        );
        assert_eq!(r.request, "GET /data/?");
        assert_eq!(r.status, Some(Status::Http(200)));
        let peer = r.peer.unwrap();
        assert_eq!(peer.port(), 8080);
        assert!(matches!(peer.ip(), IpAddr::V4(v4) if v4.octets()[0] >= 240));
        assert_eq!(r.peer_name.as_deref(), Some("api.internal"));
        let text = format!("{r:?}");
        assert!(!text.contains("secret") && !text.contains("pw"), "{text}");
    }

    #[test]
    fn redis_values_are_never_kept() {
        let r = record(
            &raw(
                kind::CLIENT,
                &[
                    ("db.system", s("redis")),
                    ("db.statement", s("SET user:42 hunter2")),
                ],
            ),
            0,
        );
        assert_eq!(r.request, "SET user:?");
        assert_eq!(r.peer, None);
        assert!(!format!("{r:?}").contains("hunter2"));
    }

    #[test]
    fn a_dns_query_reads_back_as_a_lookup() {
        let r = record(
            &raw(
                kind::CLIENT,
                &[
                    ("dns.question.name", s("Api.Internal")),
                    ("dns.question.type", s("AAAA")),
                ],
            ),
            0,
        );
        assert_eq!(
            (r.protocol, r.request.as_str()),
            (Protocol::Dns, "AAAA api.internal")
        );
    }
}
