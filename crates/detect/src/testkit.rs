//! Hand-built timelines for detector tests.

use whyslow_model::{
    AckEvent, Attribution, Connection, Direction, Exchange, ExchangeRole, Protocol, Segment,
    SegmentFlags, Status, Timeline,
};

pub struct ConnBuilder {
    pub conn: Connection,
    next_packet: u64,
    offsets: [u64; 2],
}

fn idx(d: Direction) -> usize {
    match d {
        Direction::ToServer => 0,
        Direction::ToClient => 1,
    }
}

impl ConnBuilder {
    pub fn new(id: u32, client_port: u16) -> Self {
        let client = format!("127.0.0.1:{client_port}").parse().unwrap();
        let server = "127.0.0.1:8080".parse().unwrap();
        let mut conn = Connection::new(id, client, server, 1_000_000);
        conn.syn_at_us = Some(1_000_000);
        conn.syn_ack_at_us = Some(1_000_050);
        conn.established_at_us = Some(1_000_100);
        ConnBuilder {
            conn,
            next_packet: 1,
            offsets: [0, 0],
        }
    }

    /// A data segment of `len` bytes at `at_us`; returns its packet number.
    pub fn data(&mut self, d: Direction, at_us: u64, len: u32) -> u64 {
        let offset = self.offsets[idx(d)];
        self.offsets[idx(d)] += len as u64;
        self.segment(d, at_us, offset, len, SegmentFlags::default())
    }

    pub fn segment(
        &mut self,
        d: Direction,
        at_us: u64,
        offset: u64,
        len: u32,
        flags: SegmentFlags,
    ) -> u64 {
        let packet = self.next_packet;
        self.next_packet += 1;
        self.conn.segments.push(Segment {
            packet,
            at_us,
            direction: d,
            stream_offset: offset,
            len,
            flags,
        });
        self.conn.last_at_us = self.conn.last_at_us.max(at_us);
        packet
    }

    /// `len` bytes at `offset` sent again at `at_us` (a retransmission).
    pub fn resend(&mut self, d: Direction, at_us: u64, offset: u64, len: u32) -> u64 {
        let flags = SegmentFlags {
            retransmission: true,
            ..SegmentFlags::default()
        };
        self.segment(d, at_us, offset, len, flags)
    }

    /// A timeline of this connection alone.
    pub fn timeline(self) -> Timeline {
        Timeline {
            connections: vec![self.conn],
            exchanges: Vec::new(),
        }
    }

    /// An ACK travelling in `d` for everything the other side sent so far.
    pub fn ack(&mut self, d: Direction, at_us: u64, window: u32, piggybacked: bool) -> u64 {
        let packet = self.next_packet;
        self.next_packet += 1;
        let acked_offset = self.offsets[idx(d.reverse())];
        self.conn.acks.push(AckEvent {
            packet,
            at_us,
            direction: d,
            acked_offset,
            window,
            piggybacked,
        });
        packet
    }
}

/// An HTTP/1 exchange on `connection`: request at `first..last`, response at `resp_first..resp_last`.
pub fn exchange(
    id: u32,
    connection: u32,
    (first, last): (u64, u64),
    (resp_first, resp_last): (u64, u64),
) -> Exchange {
    let mut e = Exchange::new(connection, Protocol::Http1, "GET /".into());
    e.id = id;
    e.status = Some(Status::Http(200));
    e.request_first_at_us = first;
    e.request_last_at_us = last;
    e.response_first_at_us = Some(resp_first);
    e.response_last_at_us = Some(resp_last);
    e
}

/// Request 0 on connection 0: read from 0 to 10 µs, answered from
/// `answer_us` for 10 µs.
pub fn request_0(answer_us: u64) -> Exchange {
    exchange(0, 0, (0, 10), (answer_us, answer_us + 10))
}

/// `c` lost `bytes` toward `direction` after `after_us`: a hole the capture
/// never held, counted as the wire source counts it.
pub fn lose(c: &mut Connection, direction: Direction, after_us: u64, bytes: u64) {
    c.gaps.push(whyslow_model::Gap {
        after_us,
        direction,
        bytes,
    });
    match direction {
        Direction::ToServer => c.to_server.gaps += 1,
        Direction::ToClient => c.to_client.gaps += 1,
    }
}

/// A loopback connection from client port 40000 + `id` to `server_port`.
pub fn conn(id: u32, server_port: u16) -> Connection {
    let client = format!("127.0.0.1:{}", 40000 + id).parse().unwrap();
    let server = format!("127.0.0.1:{server_port}").parse().unwrap();
    Connection::new(id, client, server, 0)
}

/// Servers on `ports`, one connection to each, numbered from 0: a
/// timeline once `with` its exchanges.
pub fn servers(ports: &[u16]) -> Servers<'_> {
    Servers(ports)
}

pub struct Servers<'a>(&'a [u16]);

impl Servers<'_> {
    pub fn with(self, exchanges: Vec<Exchange>) -> Timeline {
        let connections = self.0.iter().zip(0..).map(|(&p, id)| conn(id, p)).collect();
        Timeline {
            connections,
            exchanges,
        }
    }
}

/// `f` of each outbound exchange (each call), in order.
pub fn of_calls<T>(t: &Timeline, f: impl Fn(&Exchange) -> T) -> Vec<T> {
    let calls = t
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Outbound);
    calls.map(f).collect()
}

/// (call id, request it was given to, level) of each call.
pub fn given(t: &Timeline) -> Vec<(u32, Option<u32>, Option<Attribution>)> {
    of_calls(t, |e| (e.id, e.parent, e.attribution))
}

/// Asserts every call from id 100 on was given by `rule`, inferred, to the
/// request `made_for(id)`.
pub fn all_given_by(t: &Timeline, rule: whyslow_model::Rule, made_for: impl Fn(u32) -> u32) {
    for e in t
        .exchanges
        .iter()
        .filter(|e| e.role == ExchangeRole::Outbound)
    {
        let placed = (e.parent, e.attribution, e.rule);
        let expected = (
            Some(made_for(e.id)),
            Some(Attribution::Inferred),
            Some(rule),
        );
        assert_eq!(placed, expected, "call {}", e.id);
    }
}

/// `detect(&timeline)` in a request detector's tests: the detector over a
/// hand-built timeline's requests.
macro_rules! detect_on_requests {
    () => {
        fn detect(t: &whyslow_model::Timeline) -> Vec<whyslow_model::Finding> {
            let mut f = super::detect(&crate::request_calls::by_request(t));
            crate::merge::judge(&mut f);
            f
        }
    };
}
pub(crate) use detect_on_requests;

/// One query of `dns_timeline`: request ("A name"), sent at, and when
/// answered, (after how long, rcode).
pub type DnsQuery<'a> = (&'a str, u64, Option<(u64, &'a str)>);

/// A timeline of DNS queries from 10.0.0.1 to the resolver 10.0.0.53:53,
/// one UDP flow each.
pub fn dns_timeline(queries: &[DnsQuery]) -> Timeline {
    let mut t = Timeline::default();
    for (i, (request, at, answer)) in queries.iter().enumerate() {
        let client = format!("10.0.0.1:{}", 40_000 + i).parse().unwrap();
        let server = "10.0.0.53:53".parse().unwrap();
        let mut c = Connection::new(i as u32, client, server, *at);
        c.udp = true;
        c.protocol = Protocol::Dns;
        t.connections.push(c);
        let mut e = Exchange::new(i as u32, Protocol::Dns, (*request).into());
        e.id = i as u32;
        e.request_first_at_us = *at;
        e.request_last_at_us = *at;
        if let Some((after, rcode)) = answer {
            e.response_first_at_us = Some(at + after);
            e.response_last_at_us = Some(at + after);
            e.status = Some(Status::Dns((*rcode).into()));
        }
        t.exchanges.push(e);
    }
    t
}
