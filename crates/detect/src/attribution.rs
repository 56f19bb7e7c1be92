//! Which inbound request was each backing call made for? Exchanges to the
//! service under test are inbound; the rest are outbound calls, each owned by
//! the inbound exchange that was waiting for its server when the call ran.

use std::collections::HashMap;
use whyslow_model::{ExchangeRole, Timeline};

/// Marks roles and parents in place. `front_ports`: the service's own ports.
/// With concurrent inbound requests the call goes to the latest one that
/// started before it and had not begun answering: a best guess, since the
/// wire does not say which thread made a call.
pub fn attribute(timeline: &mut Timeline, front_ports: &[u16]) {
    let server_port: HashMap<u32, u16> = timeline
        .connections
        .iter()
        .map(|c| (c.id, c.server.port()))
        .collect();
    let is_front = |conn: u32| {
        server_port
            .get(&conn)
            .is_some_and(|p| front_ports.contains(p))
    };
    let inbound: Vec<(u32, u64, u64)> = timeline
        .exchanges
        .iter()
        .filter(|e| is_front(e.connection))
        .map(|e| {
            (
                e.id,
                e.request_first_at_us,
                e.response_first_at_us.unwrap_or(u64::MAX),
            )
        })
        .collect();
    for e in timeline.exchanges.iter_mut() {
        if is_front(e.connection) {
            e.role = ExchangeRole::Inbound;
            e.parent = None;
            continue;
        }
        e.role = ExchangeRole::Outbound;
        let end = e.response_last_at_us.unwrap_or(e.request_last_at_us);
        e.parent = inbound
            .iter()
            .filter(|(_, start, answer)| *start <= e.request_first_at_us && end <= *answer)
            .max_by_key(|(_, start, _)| *start)
            .map(|(id, _, _)| *id);
    }
}

/// Share of a server's exchanges that must fall inside the front's requests
/// for it to count as a backing service: unrelated traffic on the same host
/// lands inside them only by chance, and rarely for nearly all of its exchanges.
const NESTED_SHARE: f64 = 0.9;

/// Servers (ports) whose exchanges happen while the service's own requests
/// wait for an answer: its backing services, seen from the wire alone.
pub fn nested_servers(t: &Timeline, front_ports: &[u16]) -> Vec<u16> {
    let port: HashMap<u32, u16> = t
        .connections
        .iter()
        .map(|c| (c.id, c.server.port()))
        .collect();
    let windows: Vec<(u64, u64)> = t
        .exchanges
        .iter()
        .filter(|e| {
            port.get(&e.connection)
                .is_some_and(|p| front_ports.contains(p))
        })
        .filter_map(|e| Some((e.request_first_at_us, e.response_first_at_us?)))
        .collect();
    let mut counts: HashMap<u16, (usize, usize)> = HashMap::new();
    for e in &t.exchanges {
        let Some(&p) = port.get(&e.connection).filter(|p| !front_ports.contains(p)) else {
            continue;
        };
        let end = e.response_last_at_us.unwrap_or(e.request_last_at_us);
        let inside = windows
            .iter()
            .any(|&(s, a)| s <= e.request_first_at_us && end <= a);
        let c = counts.entry(p).or_default();
        c.0 += usize::from(inside);
        c.1 += 1;
    }
    let mut out: Vec<u16> = counts
        .into_iter()
        .filter(|(_, (inside, all))| *inside as f64 >= NESTED_SHARE * *all as f64)
        .map(|(p, _)| p)
        .collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::exchange;
    use whyslow_model::Connection;

    fn conn(id: u32, server_port: u16) -> Connection {
        let client = format!("127.0.0.1:{}", 40000 + id).parse().unwrap();
        Connection::new(
            id,
            client,
            format!("127.0.0.1:{server_port}").parse().unwrap(),
            0,
        )
    }

    #[test]
    fn calls_belong_to_the_request_waiting_for_them() {
        let mut t = Timeline {
            connections: vec![conn(0, 8080), conn(1, 6379)],
            exchanges: vec![
                exchange(0, 0, (100, 110), (500, 510)),     // inbound A
                exchange(1, 1, (200, 210), (300, 310)),     // call inside A
                exchange(2, 0, (1000, 1010), (1500, 1510)), // inbound B
                exchange(3, 1, (1100, 1110), (1200, 1210)), // call inside B
                exchange(4, 1, (2000, 2010), (2100, 2110)), // call outside any request
            ],
        };
        assert!(
            nested_servers(&t, &[8080]).is_empty(),
            "1 of 3 calls outside: not nested enough"
        );
        t.exchanges.pop();
        assert_eq!(nested_servers(&t, &[8080]), vec![6379]);
        attribute(&mut t, &[8080]);
        let parents: Vec<Option<u32>> = t.exchanges.iter().map(|e| e.parent).collect();
        assert_eq!(parents, vec![None, Some(0), None, Some(2)]);
        assert_eq!(t.exchanges[1].role, ExchangeRole::Outbound);
        assert_eq!(t.exchanges[2].role, ExchangeRole::Inbound);
    }
}
