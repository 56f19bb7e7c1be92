//! What a run records: HDR histograms of every latency and phase, status
//! codes and error classes (in `whyslow_model::load_record`, which result
//! readers share), and here the client's errors mapped onto those classes.

use whyslow_client::{ErrorKind, ProbeError};
pub use whyslow_model::load_record::{
    decode, encode, error_class_name, new_histogram, Metric, Recorded, Sample, ERROR_CLASSES,
    SIGFIG,
};
use whyslow_model::load_record::{error_class_at, FAILURE_KINDS, FAILURE_PHASES};

/// The client's error kinds, in the order of `FAILURE_KINDS`.
const KINDS: [ErrorKind; FAILURE_KINDS.len()] = [
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

/// Index of a failure's class: where it failed and how.
pub fn error_class(e: &ProbeError) -> usize {
    let p = FAILURE_PHASES
        .iter()
        .position(|p| *p == e.phase)
        .unwrap_or(0);
    let k = KINDS
        .iter()
        .position(|k| *k == e.kind)
        .unwrap_or(KINDS.len() - 1);
    error_class_at(p, k)
}

/// The kind of failure of an error class (how it failed, whatever the phase).
pub fn error_class_kind(class: usize) -> ErrorKind {
    KINDS[class % KINDS.len()]
}

/// When every request failed: how the most common failure failed.
pub fn all_failed(result: &crate::LoadResult) -> Option<ErrorKind> {
    if result.responses > 0 {
        return None;
    }
    let failures = result.recorded().unwrap_or_default().failures;
    let worst = (0..failures.len()).max_by_key(|i| failures[*i])?;
    (failures[worst] > 0).then(|| error_class_kind(worst))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_classes_name_phase_and_kind() {
        let e = ProbeError::new("connect", ErrorKind::Refused, "x");
        let c = error_class(&e);
        assert_eq!(error_class_name(c), "connect_refused");
        assert_eq!(error_class_kind(c), ErrorKind::Refused);
        for (phase, kind, name) in [
            ("wait", ErrorKind::Timeout, "wait_timeout"),
            ("receive", ErrorKind::EmptyReply, "receive_closed"),
            ("url", ErrorKind::BadUrl, "url_bad_url"),
            ("send", ErrorKind::Io, "send_io"),
        ] {
            let c = error_class(&ProbeError::new(phase, kind, "x"));
            assert_eq!(error_class_name(c), name);
        }
        let mut r = Recorded::default();
        r.record_failure(c, None);
        assert_eq!(
            r.failure_counts().collect::<Vec<_>>(),
            vec![("connect_refused".to_string(), 1)]
        );
    }
}
