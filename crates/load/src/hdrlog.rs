//! `--hdr-log FILE`: one histogram per interval in HdrHistogram's interval log
//! format (v1.3), readable by HistogramLogProcessor, HdrHistogram's log readers
//! in Java, Python, Go and Rust, and HdrHistogram plotters.
//!
//! Layout: header comments, `#[StartTime: …]`, `#[BaseTime: …]` (interval
//! timestamps count from it), the CSV legend, then one line per interval and
//! distribution. The corrected latency is the untagged histogram (what tools
//! read by default); `Tag=uncorrected` and `Tag=lag` follow. Values are
//! microseconds, so HistogramLogProcessor wants `-outputValueUnitRatio 1000`
//! to print milliseconds. Interval_Max is in microseconds too.

use crate::histograms::{decode, Metric, Recorded};
use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag,
};
use hdrhistogram::serialization::V2DeflateSerializer;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The legend line HdrHistogram's Java writer puts before the first interval.
const LEGEND: &str =
    "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"";

/// The distributions written per interval, and their tags (None: untagged).
const LOGGED: [(Metric, Option<&str>); 3] = [
    (Metric::Corrected, None),
    (Metric::Uncorrected, Some("uncorrected")),
    (Metric::Lag, Some("lag")),
];

pub struct HdrLog<W: Write> {
    out: W,
    serializer: V2DeflateSerializer,
}

impl HdrLog<BufWriter<File>> {
    pub fn create(path: &Path, start: SystemTime, about: &str) -> std::io::Result<Self> {
        HdrLog::new(BufWriter::new(File::create(path)?), start, about)
    }
}

impl<W: Write> HdrLog<W> {
    /// Writes the header; `about` becomes a comment line (target, schedule).
    pub fn new(mut out: W, start: SystemTime, about: &str) -> std::io::Result<Self> {
        let mut serializer = V2DeflateSerializer::new();
        IntervalLogWriterBuilder::new()
            .add_comment(&format!(
                "[Logged with whyslow {}: {about}]",
                env!("CARGO_PKG_VERSION")
            ))
            .add_comment("[Histogram log format version 1.3]")
            .add_comment("[Values in microseconds]")
            .with_start_time(start)
            .with_base_time(start)
            .begin_log_with(&mut out, &mut serializer)?;
        writeln!(out, "{LEGEND}")?;
        Ok(HdrLog { out, serializer })
    }

    /// One interval: `offset` from the start of the run, lasting `length`.
    pub fn write(
        &mut self,
        offset: Duration,
        length: Duration,
        rec: &Recorded,
    ) -> std::io::Result<()> {
        // A builder with no header settings writes nothing: it only frames the lines.
        let mut w =
            IntervalLogWriterBuilder::new().begin_log_with(&mut self.out, &mut self.serializer)?;
        for (metric, tag) in LOGGED {
            let h = rec.hist(metric);
            if tag.is_some() && h.is_empty() {
                continue;
            }
            w.write_histogram(h, offset, length, tag.and_then(Tag::new))
                .map_err(std::io::Error::other)?;
        }
        Ok(())
    }

    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// One interval histogram read back from a log.
#[derive(Debug, Clone)]
pub struct LoggedInterval {
    pub tag: Option<String>,
    /// From BaseTime (or the epoch when the log has none).
    pub start: Duration,
    pub length: Duration,
    pub histogram: hdrhistogram::Histogram<u64>,
}

/// Reads an interval log (this one's or any HdrHistogram writer's) with
/// HdrHistogram's own parser.
pub fn read(bytes: &[u8]) -> Result<Vec<LoggedInterval>, String> {
    let mut out = Vec::new();
    for entry in IntervalLogIterator::new(bytes) {
        let entry = entry.map_err(|e| format!("interval log: {e:?}"))?;
        if let LogEntry::Interval(h) = entry {
            out.push(LoggedInterval {
                tag: h.tag().map(|t| t.as_str().to_string()),
                start: h.start_timestamp(),
                length: h.duration(),
                histogram: decode(h.encoded_histogram())?,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histograms::Sample;

    #[test]
    fn log_reads_back_with_hdrhistograms_parser() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut log = HdrLog::new(Vec::new(), start, "GET http://127.0.0.1/").unwrap();
        let mut rec = Recorded::default();
        for i in 1..=100u64 {
            rec.record(&Sample {
                corrected_us: i * 100,
                uncorrected_us: i,
                lag_us: Some(3),
                status: 200,
                ..Sample::default()
            });
        }
        log.write(Duration::ZERO, Duration::from_secs(1), &rec)
            .unwrap();
        log.write(Duration::from_secs(1), Duration::from_secs(1), &rec)
            .unwrap();
        let bytes = log.finish().unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            text.contains("#[Histogram log format version 1.3]"),
            "{text}"
        );
        assert!(text.contains("#[StartTime: 1700000000.000 (seconds since epoch)]"));
        assert!(text.contains("#[BaseTime: 1700000000.000 (seconds since epoch)]"));
        assert!(text.contains(LEGEND));
        let mut untagged = 0;
        for entry in IntervalLogIterator::new(&bytes) {
            match entry.unwrap() {
                LogEntry::Interval(h) => {
                    let decoded = decode(h.encoded_histogram()).unwrap();
                    assert_eq!(decoded.len(), 100);
                    if h.tag().is_none() {
                        untagged += 1;
                        assert_eq!(decoded.max(), rec.hist(Metric::Corrected).max());
                    }
                }
                LogEntry::StartTime(_) | LogEntry::BaseTime(_) => {}
            }
        }
        assert_eq!(untagged, 2);
    }
}
