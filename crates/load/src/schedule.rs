//! When each request of an open-model run is meant to start.
//!
//! A schedule is a piecewise-linear request rate r(t). Request n (0-based) is
//! meant to start at the instant t where the cumulative count ∫₀ᵗ r reaches n,
//! so a constant rate gives evenly spaced starts, a ramp gives starts that get
//! closer together at the rate rises, and steps hold each rate for a while.
//!
//! The engine spreads the slots over L lanes (connection × stream) the way wrk2
//! spreads its rate over connections: lane i takes slots i, i+L, i+2L, … so each
//! lane runs at r/L and the lanes are evenly staggered.

use std::time::Duration;

/// The workload model of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Model {
    /// Requests start on schedule whether or not earlier ones have finished;
    /// latency counts from the intended start (corrected for coordinated omission).
    Open(Schedule),
    /// Each lane sends its next request as soon as the previous one finished.
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Segment {
    /// Seconds from the start of the run.
    start: f64,
    /// Seconds; infinite for the last, held segment.
    len: f64,
    /// Requests per second at the start and at the end of the segment.
    from: f64,
    to: f64,
    /// Requests scheduled before the segment starts.
    before: f64,
}

impl Segment {
    /// Requests scheduled within the first `t` seconds of the segment.
    fn count(&self, t: f64) -> f64 {
        if !self.len.is_finite() || self.len == 0.0 {
            return self.from * t;
        }
        self.from * t + (self.to - self.from) * t * t / (2.0 * self.len)
    }

    fn total(&self) -> f64 {
        self.count(self.len)
    }

    /// Seconds into the segment at which the cumulative count reaches `k`.
    fn time_of(&self, k: f64) -> f64 {
        if k <= 0.0 {
            return 0.0;
        }
        if !self.len.is_finite() || self.from == self.to {
            return k / self.from;
        }
        // Solve a·t² + from·t − k = 0 with a = (to − from)/(2·len); this
        // form stays exact when a → 0 and when from = 0.
        let a = (self.to - self.from) / (2.0 * self.len);
        let disc = (self.from * self.from + 4.0 * a * k).max(0.0);
        2.0 * k / (self.from + disc.sqrt())
    }
}

/// A request rate over time.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    segments: Vec<Segment>,
    /// How long the schedule lasts by itself (ramp length, sum of steps);
    /// None for a constant rate.
    natural: Option<Duration>,
    text: String,
    /// One of several generators sharing the schedule (`load --segment`):
    /// this one takes slots `first`, `first + stride`, … of it, so their
    /// union is the schedule one generator would run.
    first: u64,
    stride: u64,
}

impl Schedule {
    /// A constant rate.
    pub fn constant(rate: f64) -> Schedule {
        Schedule::build(
            &[(rate, rate, f64::INFINITY)],
            None,
            format!("{} req/s", num(rate)),
        )
    }

    /// A linear ramp from `from` to `to` over `over`, then holding `to`.
    pub fn ramp(from: f64, to: f64, over: Duration) -> Schedule {
        let text = format!(
            "ramp {} → {} req/s over {:.0} s",
            num(from),
            num(to),
            over.as_secs_f64()
        );
        let parts = [(from, to, over.as_secs_f64()), (to, to, f64::INFINITY)];
        Schedule::build(&parts, Some(over), text)
    }

    /// Each rate held for its duration, in order; the last one is held after.
    pub fn steps(steps: &[(f64, Duration)]) -> Schedule {
        let mut parts: Vec<(f64, f64, f64)> = steps
            .iter()
            .map(|&(r, d)| (r, r, d.as_secs_f64()))
            .collect();
        let last = steps.last().map(|s| s.0).unwrap_or(0.0);
        parts.push((last, last, f64::INFINITY));
        let total = steps.iter().map(|s| s.1).sum();
        let text = steps
            .iter()
            .map(|(r, d)| format!("{}/s for {:.0} s", num(*r), d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", then ");
        Schedule::build(&parts, Some(total), format!("steps: {text}"))
    }

    fn build(parts: &[(f64, f64, f64)], natural: Option<Duration>, text: String) -> Schedule {
        let mut segments = Vec::with_capacity(parts.len());
        let (mut start, mut before) = (0.0, 0.0);
        for &(from, to, len) in parts {
            let s = Segment {
                start,
                len,
                from: from.max(0.0),
                to: to.max(0.0),
                before,
            };
            if len.is_finite() {
                start += len;
                before += s.total();
            }
            segments.push(s);
        }
        Schedule {
            segments,
            natural,
            text,
            first: 0,
            stride: 1,
        }
    }

    /// Generator `index` of `count` sharing this schedule: every
    /// `count`-th slot from `index`, each at its time in the whole.
    pub fn share(&self, index: u64, count: u64) -> Schedule {
        let stride = self.stride * count.max(1);
        Schedule {
            first: self.first + self.stride * index,
            stride,
            text: format!("1/{count} of {}", self.text),
            ..self.clone()
        }
    }

    /// How long the schedule runs by itself, when it has an end.
    pub fn natural_length(&self) -> Option<Duration> {
        self.natural
    }

    /// Offset from the start of the run at which request `n` is meant to start;
    /// None when the rate never reaches it (a final rate of zero).
    pub fn time_of(&self, n: u64) -> Option<f64> {
        let n = n.checked_mul(self.stride)?.checked_add(self.first)? as f64;
        for s in &self.segments {
            let end = if s.len.is_finite() {
                s.before + s.total()
            } else {
                f64::INFINITY
            };
            if n < end {
                if s.from == 0.0 && s.to == 0.0 {
                    return None;
                }
                return Some(s.start + s.time_of(n - s.before));
            }
        }
        None
    }

    /// Requests scheduled within the first `t` of the run.
    pub fn count_until(&self, t: Duration) -> f64 {
        let t = t.as_secs_f64();
        let whole = self
            .segments
            .iter()
            .find(|s| t < s.start + s.len)
            .map_or(0.0, |s| s.before + s.count(t - s.start));
        if self.stride == 1 {
            return whole;
        }
        // Slots first, first + stride, … that start before `t`.
        ((whole - self.first as f64) / self.stride as f64)
            .ceil()
            .max(0.0)
    }

    /// The rate at offset `t`.
    pub fn rate_at(&self, t: Duration) -> f64 {
        let t = t.as_secs_f64();
        for s in &self.segments {
            if t < s.start + s.len {
                let whole = match !s.len.is_finite() || s.len == 0.0 {
                    true => s.from,
                    false => s.from + (s.to - s.from) * (t - s.start) / s.len,
                };
                return whole / self.stride as f64;
            }
        }
        0.0
    }

    /// "500 req/s", "ramp 100 → 1000 req/s over 30 s".
    pub fn describe(&self) -> &str {
        &self.text
    }
}

/// A rate without needless decimals.
pub fn num(r: f64) -> String {
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_rate_is_evenly_spaced() {
        let s = Schedule::constant(1000.0);
        assert_eq!(s.time_of(0), Some(0.0));
        assert!((s.time_of(500).unwrap() - 0.5).abs() < 1e-12);
        assert!((s.count_until(Duration::from_secs(2)) - 2000.0).abs() < 1e-9);
        assert_eq!(s.natural_length(), None);
    }

    #[test]
    fn shares_together_are_the_whole_schedule() {
        let whole = Schedule::ramp(100.0, 1000.0, Duration::from_secs(10));
        let shares: Vec<Schedule> = (0..4).map(|i| whole.share(i, 4)).collect();
        let mut times: Vec<f64> = shares
            .iter()
            .flat_map(|s| (0..250).map(|n| s.time_of(n).unwrap()))
            .collect();
        times.sort_by(f64::total_cmp);
        let want: Vec<f64> = (0..1000).map(|n| whole.time_of(n).unwrap()).collect();
        assert_eq!(times, want);
        let t = Duration::from_secs(12);
        let counted: f64 = shares.iter().map(|s| s.count_until(t)).sum();
        assert!((counted - whole.count_until(t)).abs() < 4.0, "{counted}");
        let rate: f64 = shares.iter().map(|s| s.rate_at(t)).sum();
        assert!((rate - 1000.0).abs() < 1e-9);
        assert_eq!(shares[0].describe(), shares[3].describe());
    }

    #[test]
    fn ramp_inverts_its_integral() {
        let s = Schedule::ramp(100.0, 1000.0, Duration::from_secs(10));
        // ∫₀¹⁰ (100 + 90t) dt = 1000 + 4500 = 5500 requests in the ramp.
        let t = s.time_of(5500).unwrap();
        assert!((t - 10.0).abs() < 1e-9, "{t}");
        for n in [1u64, 17, 999, 4321, 5499, 6000, 20_000] {
            let t = s.time_of(n).unwrap();
            let back = s.count_until(Duration::from_secs_f64(t));
            assert!((back - n as f64).abs() < 1e-6, "n {n}: t {t} back {back}");
        }
        assert!((s.rate_at(Duration::from_secs(5)) - 550.0).abs() < 1e-9);
        assert!((s.rate_at(Duration::from_secs(50)) - 1000.0).abs() < 1e-9);
        // A falling ramp works the same way.
        let up = Schedule::ramp(0.0, 400.0, Duration::from_secs(2));
        assert_eq!(up.time_of(0), Some(0.0), "a ramp from zero starts at once");
        let down = Schedule::ramp(1000.0, 0.0, Duration::from_secs(2));
        let t = down.time_of(999).unwrap();
        assert!((down.count_until(Duration::from_secs_f64(t)) - 999.0).abs() < 1e-6);
        assert_eq!(down.time_of(1000), None, "rate ends at zero");
    }

    #[test]
    fn steps_hold_each_rate() {
        let s = Schedule::steps(&[
            (100.0, Duration::from_secs(2)),
            (0.0, Duration::from_secs(1)),
            (400.0, Duration::from_secs(1)),
        ]);
        assert_eq!(s.natural_length(), Some(Duration::from_secs(4)));
        assert!((s.time_of(100).unwrap() - 1.0).abs() < 1e-12);
        // Slot 200 is the first of the 400/s step: the zero step is skipped.
        assert!((s.time_of(200).unwrap() - 3.0).abs() < 1e-12);
        assert!((s.time_of(300).unwrap() - 3.25).abs() < 1e-12);
        assert!(s.describe().starts_with("steps: 100/s for 2 s"));
    }
}
