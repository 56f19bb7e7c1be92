//! `pipeline_hol`: a request waited behind an earlier one on the same
//! connection (case 004: cache reads queued behind large asynchronous writes
//! on one persistent connection). On a connection answered in order —
//! RESP, memcached, HTTP/1, PostgreSQL — request B waited for A when B was
//! sent before A's response ended. B could not be answered before its bytes
//! were in and everything ahead of it was answered; on a connection of its
//! own it would have started when it was issued. The wire shows when B was
//! issued unless its bytes queued behind A's in the sender's buffer (on
//! loopback the read reaches the wire only after the write's last byte);
//! then B was issued no earlier than the start of that run of back-to-back
//! requests, and no earlier than the inbound request it served arrived.
//! Time lost counts for the inbound request waiting on B only.

use crate::critical_path::{lanes, waited_for, Lane};
use crate::request_findings::{self, Hit};
use crate::thresholds::WORTH_SHARE;
use foldhash::{HashMap, HashMapExt};
use std::cell::OnceCell;
use std::collections::BTreeMap;
use whyslow_model::{
    fmt_bytes, fmt_ms, Evidence, Exchange, Facts, Finding, FindingKind, Population, Severity,
    Subject, Timeline,
};

/// Below a millisecond a wait is not worth a finding (pool_queueing's bound).
const MIN_WAIT_US: u64 = 1_000;
/// Requests whose first byte follows the previous one's last byte within
/// this gap queued behind it: a sender draining its buffer puts segments on
/// the wire microseconds apart (12 µs for 1500 B at 1 Gbit/s); a request
/// issued later leaves a visible gap.
const BACK_TO_BACK_US: u64 = 200;
/// One exchange ahead must hold the connection at least this long, and so
/// must its kind of request typically (the median over the capture): a
/// client pipeline of quick commands queues by design and each costs
/// microseconds; a large or slow exchange is what a connection of its own
/// avoids. A quick read that once took milliseconds was slowed by a busy
/// server (measured on the lab's cache-hol fixed at 16 clients: 30 B GETs
/// held their connection 1–4 ms while the server wrote 256 KiB values on
/// another), which another connection would not have spared the reads
/// queued behind it.
const MIN_CULPRIT_US: u64 = MIN_WAIT_US;
/// Under load, a wait that hit fewer than 1 in 100 of the exchanges
/// requests waited for is one scheduling hiccup of the server, not a
/// connection that holds requests back (a p99 this detector need not name).
const MIN_HIT_SHARE: f64 = 0.01;
/// Exchange ids listed as evidence per wait.
const AHEAD_LISTED: usize = 10;

/// One request that waited behind others on its connection.
#[derive(Debug, Clone)]
pub struct Wait<'a> {
    pub waiting: &'a Exchange,
    pub ahead: &'a [&'a Exchange],
    /// The exchange ahead that held the connection longest.
    pub culprit: &'a Exchange,
    pub waited_us: u64,
    /// Its bytes left only after those ahead had been sent.
    pub queued_behind_bytes: bool,
}

/// When the exchange `j` of `lane` could have started on a connection of
/// its own: when sent, or at the start of the back-to-back run it queued in.
fn issued(lane: &Lane, j: usize) -> u64 {
    let from = lane.ahead_from[j];
    let mut k = j;
    while k > from {
        let gap = lane.exchanges[k]
            .request_first_at_us
            .saturating_sub(lane.exchanges[k - 1].request_last_at_us);
        if gap > BACK_TO_BACK_US {
            break;
        }
        k -= 1;
    }
    lane.exchanges[k].request_first_at_us
}

/// The time `a` alone held the connection after `from`: from when it (or
/// the wait) began, or the previous exchange was answered, to its answer.
fn held_us(lane: &Lane, k: usize, from: u64) -> u64 {
    let a = lane.exchanges[k];
    let previous_done = k
        .checked_sub(1)
        .and_then(|p| lane.exchanges[p].response_last_at_us)
        .unwrap_or(0);
    let start = a.request_first_at_us.max(previous_done).max(from);
    a.response_last_at_us.unwrap_or(0).saturating_sub(start)
}

/// Per kind of request, the median time an exchange of it held its
/// connection: what it costs by its nature.
fn typical_holds<'a>(lanes: &HashMap<u32, Lane<'a>>) -> HashMap<&'a str, u64> {
    let mut holds: HashMap<&str, Vec<u64>> = HashMap::new();
    for lane in lanes.values() {
        for (k, e) in lane.exchanges.iter().enumerate() {
            let held = held_us(lane, k, 0);
            holds.entry(e.request.as_str()).or_default().push(held);
        }
    }
    holds
        .into_iter()
        .map(|(request, v)| (request, whyslow_model::stats::median(v)))
        .collect()
}

/// The wait of exchange `j` behind those ahead of it, if it lasted at least
/// `MIN_WAIT_US` and one of them, of a kind that typically holds the
/// connection long enough to matter (`typical`, asked only once a wait
/// is long enough), did. `arrived`: when the inbound request it served
/// arrived (B cannot have been issued before).
pub fn wait<'a, 'm>(
    lane: &'a Lane<'a>,
    j: usize,
    arrived: u64,
    typical: impl FnOnce() -> &'m HashMap<&'m str, u64>,
) -> Option<Wait<'a>> {
    let b = lane.exchanges[j];
    let ahead = lane.ahead(j);
    let answered = b.response_first_at_us?;
    let sent = issued(lane, j);
    let from = sent.max(arrived);
    let ready = ahead
        .iter()
        .filter_map(|a| a.response_last_at_us)
        .max()?
        .max(b.request_first_at_us)
        .min(answered);
    // A shorter wait is never a hit, whatever held the connection: the
    // search for the culprit, and the request's entry, are skipped.
    if ready.saturating_sub(from) < MIN_WAIT_US {
        return None;
    }
    let first = lane.ahead_from[j];
    let typical = typical();
    let heavy = |k: &usize| {
        let request = lane.exchanges[*k].request.as_str();
        typical.get(request).is_some_and(|&t| t >= MIN_CULPRIT_US)
    };
    let (k, held) = (first..j)
        .filter(heavy)
        .map(|k| (k, held_us(lane, k, from)))
        .max_by_key(|x| x.1)?;
    (held >= MIN_CULPRIT_US).then(|| Wait {
        waiting: b,
        ahead,
        culprit: lane.exchanges[k],
        waited_us: ready.saturating_sub(from),
        queued_behind_bytes: sent < b.request_first_at_us,
    })
}

struct Told<'a> {
    waiting: &'a str,
    culprit: &'a str,
    culprit_bytes: u64,
    protocol: &'static str,
}

pub fn detect(t: &Timeline) -> Vec<Finding> {
    // Built on first need: most windows have no exchange queued behind another.
    let index: OnceCell<HashMap<u32, &Exchange>> = OnceCell::new();
    let by_id = || index.get_or_init(|| t.exchanges.iter().map(|e| (e.id, e)).collect());
    let lanes = lanes(t);
    // Built on first need, like `index`: most waits are too short to ask.
    let holds: OnceCell<HashMap<&str, u64>> = OnceCell::new();
    let typical = || holds.get_or_init(|| typical_holds(&lanes));
    // The worst wait per inbound request (waits of one request overlap),
    // its connection and the request's duration.
    let mut worst: BTreeMap<u32, (Wait, u32, u64)> = BTreeMap::new();
    let mut waited = 0usize;
    for (&conn, lane) in &lanes {
        for j in 0..lane.exchanges.len() {
            let b = lane.exchanges[j];
            if !waited_for(b) {
                continue;
            }
            waited += 1;
            if lane.ahead(j).is_empty() {
                continue;
            }
            let request = b.parent.and_then(|p| by_id().get(&p)).copied().unwrap_or(b);
            let arrived = if request.id == b.id {
                0
            } else {
                request.request_last_at_us
            };
            let Some(w) = wait(lane, j, arrived, typical) else {
                continue;
            };
            let total = request.duration_us();
            let entry = worst.entry(request.id).or_insert((w.clone(), conn, total));
            // Of equal waits, the first exchange's: lanes come in hash order.
            let longer = (w.waited_us, std::cmp::Reverse(w.waiting.id))
                > (entry.0.waited_us, std::cmp::Reverse(entry.0.waiting.id));
            if longer {
                *entry = (w, conn, total);
            }
        }
    }
    let mut hits = Vec::new();
    for (w, conn, total) in worst.into_values() {
        let lost = w.waited_us.min(total);
        if lost < MIN_WAIT_US || (lost as f64) < WORTH_SHARE * total as f64 {
            continue;
        }
        let facts = Told {
            waiting: w.waiting.request.as_str(),
            culprit: w.culprit.request.as_str(),
            culprit_bytes: w.culprit.request_bytes.max(w.culprit.response_bytes),
            protocol: w.culprit.protocol.name(),
        };
        request_findings::push(&mut hits, lost, facts, |_| queued(&w, conn));
    }
    // Judged once over the capture: `MIN_HIT_SHARE` of the exchanges waited for.
    let population = Population::share_of(hits.len(), waited, MIN_HIT_SHARE);
    if waited == 0 {
        return Vec::new();
    }
    if hits.is_empty() {
        let tally = Finding::tally(FindingKind::PipelineHol, Subject::default(), population);
        return vec![tally];
    }
    let mut f = request_findings::finding(
        FindingKind::PipelineHol,
        Severity::Critical,
        hits,
        summary,
        "give reads a connection of their own and put writes (large or asynchronous \
         ones above all) on a dedicated one, or use a client that multiplexes \
         (HTTP/2) or keeps values small; pipeline only batches of quick commands",
    );
    f.population = Some(population);
    vec![f]
}

fn queued(w: &Wait, connection: u32) -> Evidence {
    let c = w.culprit;
    let bytes_ahead = w
        .ahead
        .iter()
        .map(|a| a.request_bytes + a.response_bytes)
        .sum();
    let note = if w.queued_behind_bytes {
        format!("its bytes left right after the {} request's", c.request)
    } else {
        format!("sent while {} was unanswered", c.request)
    };
    Evidence::Queued {
        facts: Default::default(),
        connection,
        exchange: w.waiting.id,
        request: w.waiting.request.to_string(),
        ahead: w.ahead.iter().take(AHEAD_LISTED).map(|a| a.id).collect(),
        bytes_ahead,
        waited_us: w.waited_us,
        note,
    }
}

/// "GET hot:config waited 14.2 ms behind a 16.0 MiB SET stash:? on the same
/// redis connection", told of the cause that cost most in all (a write
/// queued behind a small read that was itself waiting is not the story),
/// by its request whose loss is nearest the median.
fn summary(hits: &[Hit<Told>], per: u64, facts: &mut Facts) -> String {
    let mut cost: HashMap<&str, u64> = HashMap::new();
    for h in hits {
        *cost.entry(h.facts.culprit).or_default() += h.lost_us;
    }
    let main = cost
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
        .map(|(c, _)| c);
    let typical = hits
        .iter()
        .filter(|h| Some(h.facts.culprit) == main)
        .min_by_key(|h| h.lost_us.abs_diff(per))
        .map(|h| &h.facts);
    let max = hits.iter().map(|h| h.lost_us).max().unwrap_or(0);
    let Some(f) = typical else {
        return String::new();
    };
    facts
        .0
        .insert("culprit_bytes".into(), f.culprit_bytes as f64);
    facts.set("worst_us", max as f64);
    format!(
        "{} waited {} behind a {} {} on the same {} connection ({} requests hit, worst {})",
        f.waiting,
        fmt_ms(per),
        fmt_bytes(f.culprit_bytes),
        f.culprit,
        f.protocol,
        hits.len(),
        fmt_ms(max)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the detector names, judged as a capture's findings are.
    fn detect(t: &Timeline) -> Vec<Finding> {
        let mut f = super::detect(t);
        crate::merge::judge(&mut f);
        f
    }

    fn told<'a>(waiting: &'a str, culprit: &'a str, lost_us: u64) -> Hit<Told<'a>> {
        Hit {
            lost_us,
            evidence: None,
            facts: Told {
                waiting,
                culprit,
                culprit_bytes: 1,
                protocol: "redis",
            },
        }
    }

    #[test]
    fn the_summary_tells_of_the_cause_that_cost_most() {
        // The write behind a small read has the median loss, but the reads
        // behind the large write cost most in all.
        let hits = [
            told("GET hot:config", "SET stash:?", 12_000),
            told("GET hot:config", "SET stash:?", 16_000),
            told("SET stash:?", "GET hot:config", 14_000),
        ];
        let s = summary(&hits, 14_000, &mut Facts::default());
        assert!(s.starts_with("GET hot:config waited"), "{s}");
        assert!(s.contains("SET stash:?"), "{s}");
    }
    use crate::request_calls::tests::conn;
    use crate::testkit::{exchange, servers};
    use whyslow_model::{ExchangeRole, Protocol};

    fn redis(id: u32, c: u32, cmd: &str, req: (u64, u64), resp: (u64, u64)) -> Exchange {
        let mut e = exchange(id, c, req, resp);
        e.protocol = Protocol::Redis;
        e.request = cmd.into();
        e.role = ExchangeRole::Outbound;
        e.parent = Some(0);
        e
    }

    fn page(read_answered: u64) -> Exchange {
        exchange(
            0,
            0,
            (1_000, 1_000),
            (read_answered + 100, read_answered + 200),
        )
    }

    #[test]
    fn a_read_sent_behind_a_large_write_waits_for_it() {
        // SET's 16 MiB take 14 ms to send; GET follows its last byte at once.
        let mut set = redis(1, 1, "SET stash:?", (1_100, 15_100), (15_200, 15_210));
        set.request_bytes = 16 << 20;
        let get = redis(2, 1, "GET hot:config", (15_110, 15_120), (15_220, 15_300));
        let t = servers(&[8080, 6379]).with(vec![page(15_300), set, get]);
        let f = detect(&t);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, FindingKind::PipelineHol);
        // Issued with the SET (1 100), ready when the SET was answered (15 210).
        assert_eq!(f[0].time_lost_us, 14_110);
        assert!(f[0]
            .summary
            .contains("GET hot:config waited 14.1 ms behind a 16.0 MiB SET"));
        match &f[0].evidence[0] {
            Evidence::Queued {
                exchange, ahead, ..
            } => {
                assert_eq!((*exchange, ahead.as_slice()), (2, &[1][..]));
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn a_read_sent_later_waits_only_from_when_it_was_sent() {
        // The GET leaves 5 ms after the SET's last byte: issued then.
        let set = redis(1, 1, "SET stash:?", (1_100, 2_000), (12_000, 12_010));
        let get = redis(2, 1, "GET hot:config", (7_000, 7_010), (12_020, 12_100));
        let t = servers(&[8080, 6379]).with(vec![page(12_100), set, get]);
        assert_eq!(detect(&t)[0].time_lost_us, 5_010);
    }

    #[test]
    fn a_wait_under_a_millisecond_is_no_wait_however_long_the_one_ahead() {
        // The GET is sent 1.6 ms before the SET's answer ends, after a gap
        // (so issued when sent). Its own answer begins 1.61 ms later, or
        // (its timestamps skewed) 90 µs later, while the SET still holds
        // the connection: that wait is too short to be one.
        let waits = |answered: u64| {
            let set = redis(1, 1, "SET stash:?", (1_100, 2_000), (3_000, 12_010));
            let get = redis(2, 1, "GET hot:config", (10_410, 10_410), (answered, 12_100));
            let t = servers(&[8080, 6379]).with(vec![page(12_100), set, get]);
            let lanes = lanes(&t);
            let typical = typical_holds(&lanes);
            wait(&lanes[&1], 1, 1_000, || &typical).map(|w| w.waited_us)
        };
        assert_eq!(waits(12_020), Some(1_600));
        assert_eq!(waits(10_500), None);
    }

    #[test]
    fn of_equal_waits_the_first_exchange_is_the_evidence_whatever_the_lane_order() {
        // The same SET-then-GET on eight connections, one request: every
        // wait is as long, and the one kept must not follow hash order.
        let mut exchanges = vec![page(15_300)];
        let mut connections = vec![conn(0, 8080)];
        for c in 1..=8u32 {
            let mut set = redis(
                2 * c - 1,
                c,
                "SET stash:?",
                (1_100, 15_100),
                (15_200, 15_210),
            );
            set.request_bytes = 16 << 20;
            exchanges.push(set);
            exchanges.push(redis(
                2 * c,
                c,
                "GET hot:config",
                (15_110, 15_120),
                (15_220, 15_300),
            ));
            connections.push(conn(c, 6379));
        }
        let t = Timeline {
            connections,
            exchanges,
        };
        // Each run builds its lanes' map with a new hash seed.
        for _ in 0..16 {
            let f = detect(&t);
            match &f[0].evidence[0] {
                Evidence::Queued { exchange, .. } => assert_eq!(*exchange, 2),
                e => panic!("{e:?}"),
            }
        }
    }

    #[test]
    fn calls_on_their_own_connections_or_in_turn_do_not_wait() {
        let set = redis(1, 2, "SET stash:?", (1_100, 15_100), (15_200, 15_210));
        let get = redis(2, 1, "GET hot:config", (1_110, 1_120), (1_220, 1_300));
        let again = redis(3, 1, "GET hot:config", (1_400, 1_410), (1_500, 1_600));
        let t = servers(&[8080, 6379, 6379]).with(vec![page(1_600), set, get, again]);
        assert!(detect(&t).is_empty());
    }

    #[test]
    fn a_pipeline_of_quick_commands_is_not_a_wait() {
        // 40 GETs sent at once, each answered 100 µs after the one before.
        let mut exchanges = vec![page(5_100)];
        for i in 0..40u64 {
            let at = 1_100 + i;
            let done = 1_200 + 100 * (i + 1);
            exchanges.push(redis(
                i as u32 + 1,
                1,
                "GET user:?",
                (at, at),
                (done - 50, done),
            ));
        }
        let t = servers(&[8080, 6379]).with(exchanges);
        assert!(detect(&t).is_empty());
    }

    #[test]
    fn a_write_no_request_waits_for_queues_nothing_that_counts() {
        // Two asynchronous writes on a writer connection, neither waited for.
        let mut first = redis(1, 1, "SET stash:?", (1_100, 9_000), (9_100, 9_110));
        let mut second = redis(2, 1, "SET stash:?", (9_010, 19_000), (19_100, 19_110));
        first.parent = None;
        second.parent = None;
        let t = servers(&[8080, 6379]).with(vec![page(1_500), first, second]);
        assert!(detect(&t).is_empty());
    }

    /// Ten quick reads on one connection, then `slow` holding it 4 ms with
    /// three reads sent right behind it, all for one page; when `slow` is
    /// no read, ten more of its kind for a later page, each as costly as
    /// `typical_us`.
    fn behind_one_slow(slow: &str, typical_us: u64) -> Timeline {
        let read = |id, at, answered| redis(id, 1, "GET hot:config", (at, at + 5), answered);
        let mut exchanges = vec![
            page(14_020),
            exchange(50, 2, (39_000, 39_010), (99_000, 99_010)),
        ];
        for n in 0..10u32 {
            let at = 1_000 + u64::from(n) * 200;
            exchanges.push(read(1 + n, at, (at + 50, at + 55)));
            if slow != "GET hot:config" {
                let at = 40_000 + u64::from(n) * 5_000;
                let end = at + typical_us;
                let mut e = redis(11 + n, 1, slow, (at, at + 5), (end, end + 5));
                e.parent = Some(50);
                exchanges.push(e);
            }
        }
        exchanges.push(redis(30, 1, slow, (10_000, 10_005), (14_000, 14_005)));
        for n in 0..3u32 {
            exchanges.push(read(31 + n, 10_010 + u64::from(n) * 5, (14_010, 14_020)));
        }
        servers(&[8080, 6379, 8080]).with(exchanges)
    }

    #[test]
    fn reads_behind_a_quick_read_a_busy_server_slowed_are_no_head_of_line() {
        assert!(detect(&behind_one_slow("GET hot:config", 50)).is_empty());
        // The same wait behind a write that always takes milliseconds is.
        let f = detect(&behind_one_slow("SET stash:?", 4_000));
        assert_eq!(f.len(), 1);
        assert!(f[0].summary.contains("SET stash:?"), "{}", f[0].summary);
    }
}
