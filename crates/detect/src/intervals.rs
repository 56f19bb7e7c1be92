//! Arithmetic on time spans `(start, end)` in µs: how many overlap at
//! once, how much time they cover. Shared by attribution and the detectors,
//! so neither reaches into the other for it.

/// Spans sorted by start, merged where they overlap.
pub fn merged_spans(spans: impl IntoIterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (a, b) in spans {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Most spans open at one instant; one ending when another starts does
/// not overlap it.
pub fn most_at_once(spans: impl Iterator<Item = (u64, u64)>) -> usize {
    let mut edges: Vec<(u64, i32)> = Vec::with_capacity(spans.size_hint().0 * 2);
    for (start, end) in spans {
        edges.push((start, 1));
        edges.push((end, -1));
    }
    edges.sort_unstable(); // at equal times, ends (-1) come first
    running_max(edges.iter().map(|e| e.1)) as usize
}

/// The highest running sum of `steps` (0 at least).
pub fn running_max(steps: impl Iterator<Item = i32>) -> i32 {
    let (mut now, mut max) = (0, 0);
    for s in steps {
        now += s;
        max = max.max(now);
    }
    max
}

/// Time covered by at least one of the spans, each clipped to `window`.
pub fn covered_us(spans: impl Iterator<Item = (u64, u64)>, window: (u64, u64)) -> u64 {
    let mut v: Vec<(u64, u64)> = spans
        .map(|(a, b)| (a.max(window.0), b.min(window.1)))
        .filter(|(a, b)| a < b)
        .collect();
    v.sort_unstable();
    let (mut total, mut reach) = (0, 0);
    for (a, b) in v {
        let a = a.max(reach);
        if b > a {
            total += b - a;
            reach = b;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_overlapping_and_handed_on() {
        let spans = [(0, 100), (50, 150), (150, 200), (300, 400)];
        assert_eq!(most_at_once(spans.into_iter()), 2, "one ends as one starts");
        assert_eq!(covered_us(spans.into_iter(), (0, 350)), 250);
        assert_eq!(merged_spans(spans), vec![(0, 200), (300, 400)]);
        assert_eq!(running_max([1, 1, -1, 1, -1, -1].into_iter()), 2);
    }
}
