//! Load-run charts: the latency histogram, the percentile spectrum
//! (corrected and uncorrected, as HdrHistogram plots it), and latency,
//! throughput and generator lag over time.

use super::svg::{ticks, Scale, Svg};
use std::fmt::Write;
use whyslow_model::{IntervalPoint, LoadResult, Metric};

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 60.0;
const BOTTOM: f64 = 30.0;
/// Histogram bars: fine enough to see two modes, coarse enough to read.
const BINS: usize = 60;
/// Spectrum points, as percentiles "nines": 0 %, 50 %, 90 %, 99 %, … 99.999 %.
const SPECTRUM_NINES: f64 = 5.0;

pub fn load_charts(out: &mut String, l: &LoadResult) {
    let rec = l.recorded().ok();
    if let Some(rec) = &rec {
        let main = if rec.hist(Metric::Corrected).is_empty() {
            Metric::Uncorrected
        } else {
            Metric::Corrected
        };
        let _ = writeln!(out, "<h3>Latency histogram ({})</h3>", main.name());
        out.push_str(&histogram(rec.hist(main)));
        out.push_str(
            "<h3>Percentile spectrum</h3><p class=\"legend\">\
            <span style=\"background:#1f5fa8\"></span>corrected (what users saw)\
            <span style=\"background:#d9534f\"></span>uncorrected (service time)</p>\n",
        );
        out.push_str(&spectrum(&[
            rec.hist(Metric::Corrected),
            rec.hist(Metric::Uncorrected),
        ]));
    } else {
        out.push_str("<p class=\"note\">no histograms in this result (a --json summary): write it with -o to chart it</p>\n");
    }
    if !l.intervals.is_empty() {
        out.push_str("<h3>Latency over time</h3><p class=\"legend\">\
            <span style=\"background:#1f5fa8\"></span>p50<span style=\"background:#d9534f\"></span>p99\
            <span style=\"background:#5cb85c\"></span>generator lag p99</p>\n");
        let s = |f: fn(&IntervalPoint) -> f64| -> Vec<(f64, f64)> {
            l.intervals
                .iter()
                .map(|p| (p.at_ms as f64 / 1000.0, f(p)))
                .collect()
        };
        out.push_str(&over_time(
            &[
                s(|p| p.p50_us as f64 / 1000.0),
                s(|p| p.p99_us as f64 / 1000.0),
                s(|p| p.lag_p99_us as f64 / 1000.0),
            ],
            "ms",
        ));
        out.push_str("<h3>Throughput over time</h3>\n");
        out.push_str(&over_time(&[s(|p| p.rate)], "responses/s"));
    }
}

/// A chart's frame: grid, y ticks and axes, and x ticks when `x_unit` is
/// given (histogram and spectrum label their own x axis); the two scales.
fn frame(x_max: f64, y_max: f64, x_unit: Option<&str>, y_unit: &str) -> (Svg, Scale, Scale) {
    let mut svg = Svg::new(WIDTH, HEIGHT);
    let x = Scale {
        from: (0.0, x_max),
        to: (LEFT, WIDTH - 10.0),
    };
    let y = Scale {
        from: (0.0, y_max.max(0.001)),
        to: (HEIGHT - BOTTOM, 10.0),
    };
    for t in ticks(y_max, 5) {
        svg.line(LEFT, y.at(t), WIDTH - 10.0, y.at(t), "grid");
        svg.text(LEFT - 4.0, y.at(t) + 4.0, "end", "", &format!("{t}"));
    }
    if let Some(unit) = x_unit {
        for t in ticks(x_max, 8) {
            svg.text(x.at(t), HEIGHT - 10.0, "middle", "", &format!("{t}{unit}"));
        }
    }
    svg.line(LEFT, HEIGHT - BOTTOM, WIDTH - 10.0, HEIGHT - BOTTOM, "axis");
    svg.line(LEFT, 10.0, LEFT, HEIGHT - BOTTOM, "axis");
    svg.text(LEFT + 4.0, 20.0, "start", "", y_unit);
    (svg, x, y)
}

/// Bars over log-spaced latency bins: latency spans decades.
fn histogram(h: &hdrhistogram::Histogram<u64>) -> String {
    if h.is_empty() {
        return Svg::new(WIDTH, HEIGHT).finish("empty histogram");
    }
    let (lo, hi) = ((h.min().max(1)) as f64, (h.max().max(2)) as f64);
    let (llo, lhi) = (lo.ln(), (hi * 1.0001).ln());
    let mut bins = vec![0u64; BINS];
    for v in h.iter_recorded() {
        let x = (v.value_iterated_to().max(1) as f64).ln();
        let i = (((x - llo) / (lhi - llo).max(1e-9)) * BINS as f64) as usize;
        bins[i.min(BINS - 1)] += v.count_at_value();
    }
    let top = *bins.iter().max().unwrap_or(&1) as f64;
    let (mut svg, x, y) = frame(BINS as f64, top, None, "requests");
    for (i, n) in bins.iter().enumerate() {
        let from = (llo + (lhi - llo) * i as f64 / BINS as f64).exp();
        let to = (llo + (lhi - llo) * (i + 1) as f64 / BINS as f64).exp();
        let title = format!("{:.2}–{:.2} ms: {n}", from / 1000.0, to / 1000.0);
        svg.rect(
            x.at(i as f64) + 0.5,
            y.at(*n as f64),
            x.at(1.0) - x.at(0.0) - 1.0,
            y.at(0.0) - y.at(*n as f64),
            "hist",
            &title,
        );
    }
    for i in (0..=BINS).step_by(BINS / 6) {
        let v = (llo + (lhi - llo) * i as f64 / BINS as f64).exp();
        svg.text(
            x.at(i as f64),
            HEIGHT - 10.0,
            "middle",
            "",
            &format!("{:.2} ms", v / 1000.0),
        );
    }
    svg.finish("latency histogram")
}

/// Latency by percentile on a "nines" axis: x = log10(1 / (1 − q)).
fn spectrum(hists: &[&hdrhistogram::Histogram<u64>]) -> String {
    let y_max = hists.iter().map(|h| h.max()).max().unwrap_or(0) as f64 / 1000.0;
    let (mut svg, x, y) = frame(SPECTRUM_NINES, y_max, None, "ms");
    for nines in 0..=SPECTRUM_NINES as usize {
        let q = 1.0 - 10f64.powi(-(nines as i32));
        svg.text(
            x.at(nines as f64),
            HEIGHT - 10.0,
            "middle",
            "",
            &format!("p{}", trim(q * 100.0)),
        );
    }
    for (i, h) in hists.iter().enumerate().filter(|(_, h)| !h.is_empty()) {
        let points: Vec<(f64, f64)> = (0..=100)
            .map(|k| k as f64 * SPECTRUM_NINES / 100.0)
            .map(|n| {
                let q = 1.0 - 10f64.powf(-n);
                (x.at(n), y.at(h.value_at_quantile(q) as f64 / 1000.0))
            })
            .collect();
        svg.polyline(&points, if i == 0 { "l1" } else { "l2" });
    }
    svg.finish("percentile spectrum")
}

fn trim(p: f64) -> String {
    let s = format!("{p:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// One or more series over seconds of the run.
fn over_time(series: &[Vec<(f64, f64)>], unit: &str) -> String {
    let x_max = series
        .iter()
        .flatten()
        .map(|p| p.0)
        .fold(0.0, f64::max)
        .max(0.001);
    let y_max = series
        .iter()
        .flatten()
        .map(|p| p.1)
        .fold(0.0, f64::max)
        .max(0.001);
    let (mut svg, x, y) = frame(x_max, y_max, Some(" s"), unit);
    for (i, s) in series.iter().enumerate() {
        let pts: Vec<(f64, f64)> = s.iter().map(|(a, b)| (x.at(*a), y.at(*b))).collect();
        svg.polyline(&pts, ["l1", "l2", "l3"][i % 3]);
    }
    svg.finish(&format!("{unit} over time"))
}
