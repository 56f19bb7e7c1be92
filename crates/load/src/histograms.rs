//! What a run records: HDR histograms of every latency and phase, status
//! codes and error classes. Recording is O(1) and allocation-free once a
//! histogram has grown to the largest value seen, so memory depends on the
//! range of values, never on how many requests were made.

use base64::Engine;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use whyslow_client::{ErrorKind, ProbeError};

/// Significant decimal digits kept by every histogram: HdrHistogram's usual
/// setting, and wrk2's. Values are accurate to 0.1 % of their size.
pub const SIGFIG: u8 = 3;

/// Values above a day (µs) are recorded as a day: no request lasts that
/// long, and the cap bounds a histogram's size whatever a clock does.
const MAX_VALUE_US: u64 = 86_400_000_000;
/// Status codes are counted in an array indexed by code; codes outside it
/// (not HTTP) are counted as 0.
const STATUS_SLOTS: usize = 600;

/// The distributions a run records, all in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Completion − intended start (open model); what a user would have seen.
    Corrected,
    /// Completion − actual start: the service time a closed-loop tool reports.
    Uncorrected,
    /// How late whyslow started a request whose connection was free.
    Lag,
    /// How long a request waited for its connection to finish the previous one.
    Queue,
    Connect,
    Tls,
    Send,
    Wait,
    Receive,
}

impl Metric {
    pub const ALL: [Metric; 9] = [
        Metric::Corrected,
        Metric::Uncorrected,
        Metric::Lag,
        Metric::Queue,
        Metric::Connect,
        Metric::Tls,
        Metric::Send,
        Metric::Wait,
        Metric::Receive,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Metric::Corrected => "corrected",
            Metric::Uncorrected => "uncorrected",
            Metric::Lag => "lag",
            Metric::Queue => "queue",
            Metric::Connect => "connect",
            Metric::Tls => "tls",
            Metric::Send => "send",
            Metric::Wait => "wait",
            Metric::Receive => "receive",
        }
    }

    pub fn parse(s: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// Phases a request can fail in, in the client's words.
const PHASES: [&str; 7] = ["url", "dns", "connect", "tls", "send", "wait", "receive"];
const KINDS: [ErrorKind; 9] = [
    ErrorKind::BadUrl,
    ErrorKind::Dns,
    ErrorKind::Refused,
    ErrorKind::Timeout,
    ErrorKind::Tls,
    ErrorKind::Reset,
    ErrorKind::EmptyReply,
    ErrorKind::Protocol,
    ErrorKind::Io,
];
/// Number of error classes: one per (phase, kind).
pub const ERROR_CLASSES: usize = PHASES.len() * KINDS.len();

fn kind_slug(k: ErrorKind) -> &'static str {
    match k {
        ErrorKind::BadUrl => "bad_url",
        ErrorKind::Dns => "dns",
        ErrorKind::Refused => "refused",
        ErrorKind::Timeout => "timeout",
        ErrorKind::Tls => "tls",
        ErrorKind::Reset => "reset",
        ErrorKind::EmptyReply => "closed",
        ErrorKind::Protocol => "protocol",
        ErrorKind::Io => "io",
        ErrorKind::Interrupted => "interrupted",
    }
}

/// Index of a failure's class: where it failed and how.
pub fn error_class(e: &ProbeError) -> usize {
    let p = PHASES.iter().position(|p| *p == e.phase).unwrap_or(0);
    let k = KINDS
        .iter()
        .position(|k| *k == e.kind)
        .unwrap_or(KINDS.len() - 1);
    p * KINDS.len() + k
}

/// "connect_refused", "wait_timeout", ...
pub fn error_class_name(class: usize) -> String {
    let (p, k) = (class / KINDS.len(), class % KINDS.len());
    format!(
        "{}_{}",
        PHASES[p.min(PHASES.len() - 1)],
        kind_slug(KINDS[k])
    )
}

/// The kind of failure of an error class (how it failed, whatever the phase).
pub fn error_class_kind(class: usize) -> ErrorKind {
    KINDS[class % KINDS.len()]
}

/// Histograms start sized for values up to 10 s (the default request
/// timeout), so a run's memory does not depend on how large its largest
/// latency happened to be; beyond that (queueing in an overloaded open-model
/// run) they grow by one bucket per doubling.
const PRESIZED_MAX_US: u64 = 10_000_000;

/// An empty histogram sized for 10 s that grows to fit what it records.
pub fn new_histogram() -> Histogram<u64> {
    let mut h = Histogram::new_with_bounds(1, PRESIZED_MAX_US, SIGFIG)
        .expect("valid bounds and significant digits");
    h.auto(true);
    h
}

/// One successful exchange, measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub corrected_us: u64,
    pub uncorrected_us: u64,
    /// Open model only.
    pub lag_us: Option<u64>,
    pub queue_us: Option<u64>,
    /// Only for requests that opened their connection.
    pub connect_us: Option<u64>,
    pub tls_us: Option<u64>,
    pub send_us: u64,
    pub wait_us: u64,
    pub receive_us: u64,
    pub status: u16,
}

/// Histograms and counters, for one interval, one shard, or a whole run.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub hists: [Histogram<u64>; 9],
    pub statuses: Vec<u64>,
    pub failures: [u64; ERROR_CLASSES],
}

impl Default for Recorded {
    fn default() -> Self {
        Recorded {
            hists: std::array::from_fn(|_| new_histogram()),
            statuses: vec![0; STATUS_SLOTS],
            failures: [0; ERROR_CLASSES],
        }
    }
}

impl Recorded {
    pub fn hist(&self, m: Metric) -> &Histogram<u64> {
        &self.hists[m as usize]
    }

    pub fn hist_mut(&mut self, m: Metric) -> &mut Histogram<u64> {
        &mut self.hists[m as usize]
    }

    fn put(&mut self, m: Metric, v: u64) {
        // `record` grows an auto-resizing histogram to fit (allocating only
        // when a value exceeds every earlier one's range); values are capped.
        let h = &mut self.hists[m as usize];
        if h.record(v.min(MAX_VALUE_US)).is_err() {
            h.saturating_record(v);
        }
    }

    pub fn record(&mut self, s: &Sample) {
        self.put(Metric::Corrected, s.corrected_us);
        self.put(Metric::Uncorrected, s.uncorrected_us);
        for (m, v) in [
            (Metric::Lag, s.lag_us),
            (Metric::Queue, s.queue_us),
            (Metric::Connect, s.connect_us),
            (Metric::Tls, s.tls_us),
        ] {
            if let Some(v) = v {
                self.put(m, v);
            }
        }
        self.put(Metric::Send, s.send_us);
        self.put(Metric::Wait, s.wait_us);
        self.put(Metric::Receive, s.receive_us);
        let slot = usize::from(s.status);
        self.statuses[if slot < STATUS_SLOTS { slot } else { 0 }] += 1;
    }

    /// A request that got no complete response.
    pub fn record_failure(&mut self, class: usize, lag_us: Option<u64>) {
        self.failures[class.min(ERROR_CLASSES - 1)] += 1;
        if let Some(v) = lag_us {
            self.put(Metric::Lag, v);
        }
    }

    /// Adds everything `other` recorded (exact: bucket counts add).
    pub fn add(&mut self, other: &Recorded) {
        for (h, o) in self.hists.iter_mut().zip(&other.hists) {
            h.add(o).expect("auto-resizing histograms accept any range");
        }
        for (a, b) in self.statuses.iter_mut().zip(&other.statuses) {
            *a += b;
        }
        for (a, b) in self.failures.iter_mut().zip(&other.failures) {
            *a += b;
        }
    }

    pub fn reset(&mut self) {
        self.hists.iter_mut().for_each(Histogram::reset);
        self.statuses.iter_mut().for_each(|c| *c = 0);
        self.failures = [0; ERROR_CLASSES];
    }

    /// Complete responses, whatever their status.
    pub fn responses(&self) -> u64 {
        self.statuses.iter().sum()
    }

    pub fn failed(&self) -> u64 {
        self.failures.iter().sum()
    }

    /// Responses whose status counts as an error: outside 200–399 (k6's rule).
    pub fn bad_statuses(&self) -> u64 {
        self.statuses
            .iter()
            .enumerate()
            .filter(|(code, _)| !(200..400).contains(code))
            .map(|(_, n)| n)
            .sum()
    }

    /// (status, count) for every status seen.
    pub fn status_counts(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.statuses
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(code, n)| (code as u16, *n))
    }

    /// (class name, count) for every failure class seen.
    pub fn failure_counts(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        self.failures
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(c, n)| (error_class_name(c), *n))
    }
}

/// A histogram as HdrHistogram's tools exchange it: V2 compressed encoding,
/// base64 ("HISTFAAA…"), the same text as one interval-log line carries.
pub fn encode(h: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut bytes)
        .expect("serializing to memory cannot fail");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Reverses `encode`; accepts the uncompressed V2 encoding too.
pub fn decode(text: &str) -> Result<Histogram<u64>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("histogram is not base64: {e}"))?;
    let mut h: Histogram<u64> = Deserializer::new()
        .deserialize(&mut &bytes[..])
        .map_err(|e| format!("histogram does not decode: {e:?}"))?;
    h.auto(true);
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(v: u64) -> Sample {
        Sample {
            corrected_us: v,
            uncorrected_us: v / 2,
            lag_us: Some(v % 7),
            queue_us: Some(0),
            send_us: 3,
            wait_us: v,
            receive_us: 1,
            status: if v.is_multiple_of(10) { 503 } else { 200 },
            ..Sample::default()
        }
    }

    /// Recording one set of values in one place equals recording them in two
    /// halves and merging — through the text encoding, bucket by bucket.
    #[test]
    fn merge_of_halves_equals_the_whole() {
        let values: Vec<u64> = (0..20_000u64).map(|i| (i * 7919) % 250_000 + 1).collect();
        let mut whole = Recorded::default();
        let (mut a, mut b) = (Recorded::default(), Recorded::default());
        for (i, v) in values.iter().enumerate() {
            whole.record(&sample(*v));
            let half: &mut Recorded = if i % 3 == 0 { &mut a } else { &mut b };
            half.record(&sample(*v));
        }
        let mut merged = Recorded::default();
        for part in [&a, &b] {
            for (m, h) in Metric::ALL.iter().zip(&part.hists) {
                let back = decode(&encode(h)).unwrap();
                merged.hist_mut(*m).add(&back).unwrap();
            }
        }
        merged.statuses = a.statuses.clone();
        for (x, y) in merged.statuses.iter_mut().zip(&b.statuses) {
            *x += y;
        }
        for m in Metric::ALL {
            assert_eq!(merged.hist(m), whole.hist(m), "{}", m.name());
            for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
                assert_eq!(
                    merged.hist(m).value_at_quantile(q),
                    whole.hist(m).value_at_quantile(q)
                );
            }
        }
        assert_eq!(merged.statuses, whole.statuses);
        assert_eq!(whole.bad_statuses(), 2000);
    }

    #[test]
    fn error_classes_name_phase_and_kind() {
        let e = ProbeError::new("connect", ErrorKind::Refused, "x");
        let c = error_class(&e);
        assert_eq!(error_class_name(c), "connect_refused");
        assert_eq!(error_class_kind(c), ErrorKind::Refused);
        let mut r = Recorded::default();
        r.record_failure(c, None);
        r.record_failure(c, None);
        assert_eq!(r.failed(), 2);
        assert_eq!(
            r.failure_counts().collect::<Vec<_>>(),
            vec![("connect_refused".to_string(), 2)]
        );
    }
}
