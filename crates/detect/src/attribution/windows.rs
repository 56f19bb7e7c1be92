//! Inbound requests as waiting windows (first request byte → first response
//! byte), sorted by start, with the latest answer among each prefix: "is
//! this call inside some window?" is one binary search, and "which
//! windows?" walks back only over windows that could still contain it.

use foldhash::{HashMap, HashMapExt};
use whyslow_model::{Exchange, Timeline};

/// One inbound request's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Window {
    pub start: u64,
    /// First response byte; for an unanswered request, when its connection
    /// ended, or never.
    pub answer: u64,
    /// The inbound exchange.
    pub id: u32,
}

impl Window {
    /// Time the window leaves around [start, end] it encloses: small when
    /// the request's arrival and answer closely bracket the call.
    pub fn slack(&self, start: u64, end: u64) -> u64 {
        start.saturating_sub(self.start) + self.answer.saturating_sub(end)
    }

    pub fn len(&self) -> u64 {
        self.answer.saturating_sub(self.start)
    }
}

/// Windows that enclose a span, at most this many walked back over: past
/// it, a call has so many candidates that no timing tells them apart.
pub const MAX_WALK: usize = 512;

pub struct Windows {
    /// By start.
    spans: Vec<Window>,
    /// Latest answer among spans[..=i].
    reach: Vec<u64>,
}

impl Windows {
    pub fn new(mut spans: Vec<Window>) -> Self {
        spans.sort_unstable();
        let mut reach = Vec::with_capacity(spans.len());
        let mut max = 0;
        for w in &spans {
            max = max.max(w.answer);
            reach.push(max);
        }
        Windows { spans, reach }
    }

    /// The windows that enclose [start, end], latest-starting first, into
    /// `out` (cleared). False when the walk stopped at MAX_WALK windows
    /// with more possibly enclosing it.
    pub fn enclosing(&self, start: u64, end: u64, out: &mut Vec<Window>) -> bool {
        out.clear();
        let mut i = self.spans.partition_point(|w| w.start <= start);
        let mut walked = 0;
        while i > 0 {
            i -= 1;
            if self.reach[i] < end {
                return true; // no window at or before i lasts long enough
            }
            if walked == MAX_WALK {
                return false;
            }
            walked += 1;
            if self.spans[i].answer >= end {
                out.push(self.spans[i]);
            }
        }
        true
    }

    /// Whether a request the capture lost has a window here.
    pub fn any_lost(&self) -> bool {
        self.spans.iter().any(|w| is_lost(w.id))
    }

    /// Whether some window encloses [start, end].
    pub fn any_encloses(&self, start: u64, end: u64) -> bool {
        let mut i = self.spans.partition_point(|w| w.start <= start);
        while i > 0 {
            i -= 1;
            if self.reach[i] < end {
                return false;
            }
            if self.spans[i].answer >= end {
                return true;
            }
        }
        false
    }
}

/// Windows of the exchanges to servers on `ports`. An unanswered request
/// waits until its connection closed, or to the end of the capture — but on
/// a connection that carries one request at a time (no HTTP/2 stream), no
/// longer than until the next request on it began: its answer came before
/// that, and a capture that lost it (a gap, a drop) must not leave it
/// waiting through every later call.
///
/// A request the capture lost whole (a hole toward the service on its
/// connection) waited too: it gets a window of its own (`lost`), which no
/// rule may give a call to but which any call it encloses may be.
pub fn requests(t: &Timeline, port: &HashMap<u32, u16>, ports: &[u16]) -> Windows {
    windows(t, port, ports, |e| e.request_first_at_us, true)
}

/// Ids of the windows of requests the capture lost: from here up. A call
/// given to one is ambiguous (`Table::decide`).
pub const LOST_REQUEST: u32 = u32::MAX - (1 << 24);

/// Whether `id` is a lost request's window.
pub fn is_lost(id: u32) -> bool {
    id >= LOST_REQUEST
}

/// `requests`, each window opening once its request arrived whole (last
/// request byte): when a service is sought, a server is one only where
/// the calls it encloses came after it heard what it was asked. A client
/// that streams a large write to a cache while unrelated requests come
/// and go encloses them too, while it is still sending.
pub fn arrived(t: &Timeline, port: &HashMap<u32, u16>, ports: &[u16]) -> Windows {
    windows(t, port, ports, |e| e.request_last_at_us, false)
}

fn windows(
    t: &Timeline,
    port: &HashMap<u32, u16>,
    ports: &[u16],
    opens: impl Fn(&Exchange) -> u64,
    with_lost: bool,
) -> Windows {
    let closed: HashMap<u32, u64> = t
        .connections
        .iter()
        .filter(|c| c.closed_by.is_some())
        .map(|c| (c.id, c.last_at_us))
        .collect();
    let inbound = |e: &&Exchange| port.get(&e.connection).is_some_and(|p| ports.contains(p));
    // Each one-at-a-time connection's request starts, sorted.
    let mut starts: HashMap<u32, Vec<u64>> = HashMap::new();
    for e in t
        .exchanges
        .iter()
        .filter(inbound)
        .filter(|e| e.stream.is_none())
    {
        starts
            .entry(e.connection)
            .or_default()
            .push(e.request_first_at_us);
    }
    for v in starts.values_mut() {
        v.sort_unstable();
    }
    let next_request = |e: &Exchange| {
        let v = starts.get(&e.connection).filter(|_| e.stream.is_none())?;
        let i = v.partition_point(|&s| s <= e.request_first_at_us);
        v.get(i).copied()
    };
    let mut spans: Vec<Window> = t
        .exchanges
        .iter()
        .filter(inbound)
        .map(|e| Window {
            start: opens(e),
            answer: e
                .response_first_at_us
                .or_else(|| next_request(e))
                .or_else(|| closed.get(&e.connection).copied())
                .unwrap_or(u64::MAX),
            id: e.id,
        })
        .collect();
    if with_lost {
        spans.extend(lost(t, port, ports, &starts, &closed));
    }
    Windows::new(spans)
}

/// A window for each hole toward the service on a one-at-a-time inbound
/// connection (a request may be in it) that could have waited while this
/// timeline's requests did: from the answer before it on that connection (or the
/// connection's start) to the next request on it, or its close, or else no
/// longer after the hole than the longest wait of a request the capture
/// holds. HTTP/2 connections multiplex: a hole there says nothing of when
/// its request waited, and gets none.
fn lost(
    t: &Timeline,
    port: &HashMap<u32, u16>,
    ports: &[u16],
    starts: &HashMap<u32, Vec<u64>>,
    closed: &HashMap<u32, u64>,
) -> Vec<Window> {
    let mut answered: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
    let mut multiplexed: foldhash::HashSet<u32> = Default::default();
    let (mut first, mut last, mut longest) = (u64::MAX, 0, 0);
    for e in &t.exchanges {
        if e.stream.is_some() {
            multiplexed.insert(e.connection);
        } else if starts.contains_key(&e.connection) {
            let answer = e.response_first_at_us.unwrap_or(e.request_last_at_us);
            answered
                .entry(e.connection)
                .or_default()
                .push((e.request_first_at_us, answer));
            first = first.min(e.request_first_at_us);
            last = last.max(answer);
            longest = longest.max(answer.saturating_sub(e.request_first_at_us));
        }
    }
    let mut out = Vec::new();
    let inbound = |c: &&whyslow_model::Connection| {
        port.get(&c.id).is_some_and(|p| ports.contains(p)) && !c.gaps.is_empty()
    };
    for c in t.connections.iter().filter(inbound) {
        if multiplexed.contains(&c.id) {
            continue;
        }
        let mut before = answered.get(&c.id).cloned().unwrap_or_default();
        before.sort_unstable();
        let holes = c
            .gaps
            .iter()
            .filter(|g| g.direction == whyslow_model::Direction::ToServer);
        for g in holes {
            let i = before.partition_point(|&(s, _)| s < g.after_us);
            let start = i.checked_sub(1).map_or(c.first_at_us, |k| before[k].1);
            let answer = before
                .get(i)
                .map(|&(s, _)| s)
                .or_else(|| closed.get(&c.id).copied())
                .unwrap_or_else(|| g.after_us.saturating_add(longest));
            if first <= last && (answer < first || start > last) {
                continue; // waited while none of this timeline's requests did
            }
            let id = LOST_REQUEST.saturating_add(out.len() as u32);
            out.push(Window { start, answer, id });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(start: u64, answer: u64, id: u32) -> Window {
        Window { start, answer, id }
    }

    #[test]
    fn overlapping_windows_enclose_what_they_bracket() {
        // A long request, a short one inside it, and one after both.
        let ws = Windows::new(vec![w(0, 1000, 1), w(100, 200, 2), w(1500, 1600, 3)]);
        let mut out = Vec::new();
        let ids = |out: &[Window]| out.iter().map(|w| w.id).collect::<Vec<_>>();
        assert!(ws.enclosing(120, 150, &mut out));
        assert_eq!(ids(&out), vec![2, 1]);
        ws.enclosing(300, 400, &mut out);
        assert_eq!(ids(&out), vec![1], "after 2 answered, 1 still waits");
        ws.enclosing(900, 1100, &mut out);
        assert!(out.is_empty(), "ends after every window answered");
        assert!(!ws.any_encloses(900, 1100));
        assert!(ws.any_encloses(1550, 1560));
        assert!(Windows::new(vec![]).enclosing(1, 2, &mut out) && out.is_empty());
        assert_eq!(w(100, 200, 0).slack(120, 150), 70);
    }

    #[test]
    fn the_walk_back_is_bounded() {
        let ws = Windows::new((0..2_000).map(|i| w(i, u64::MAX, i as u32)).collect());
        let mut out = Vec::new();
        assert!(!ws.enclosing(5_000, 5_001, &mut out));
        assert_eq!(out.len(), MAX_WALK);
    }
}
