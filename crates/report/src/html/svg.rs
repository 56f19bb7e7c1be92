//! A few SVG shapes, written as text: enough for bars, lines and arrows
//! without a plotting dependency, and byte-for-byte the same for the same input.

use super::escape;
use std::fmt::Write;

pub struct Svg {
    pub width: f64,
    pub height: f64,
    body: String,
}

impl Svg {
    pub fn new(width: f64, height: f64) -> Svg {
        Svg {
            width,
            height,
            body: String::new(),
        }
    }

    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, class: &str, title: &str) {
        let _ = write!(
            self.body,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}" class="{class}"><title>{}</title></rect>"#,
            w.max(0.5),
            escape(title)
        );
    }

    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, class: &str) {
        let _ = write!(
            self.body,
            r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" class="{class}"/>"#
        );
    }

    pub fn arrow(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, class: &str) {
        let _ = write!(
            self.body,
            r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" class="{class}" marker-end="url(#head)"/>"#
        );
    }

    pub fn text(&mut self, x: f64, y: f64, anchor: &str, class: &str, text: &str) {
        let _ = write!(
            self.body,
            r#"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}" class="{class}">{}</text>"#,
            escape(text)
        );
    }

    pub fn polyline(&mut self, points: &[(f64, f64)], class: &str) {
        let pts: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = write!(
            self.body,
            r#"<polyline points="{}" class="{class}" fill="none"/>"#,
            pts.join(" ")
        );
    }

    pub fn finish(self, label: &str) -> String {
        format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{}" width="{:.0}" height="{:.0}" viewBox="0 0 {:.0} {:.0}"><defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>{}</svg>"#,
            escape(label),
            self.width,
            self.height,
            self.width,
            self.height,
            self.body
        )
    }
}

/// A linear scale from a data range onto pixels.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    pub from: (f64, f64),
    pub to: (f64, f64),
}

impl Scale {
    pub fn at(&self, v: f64) -> f64 {
        let span = (self.from.1 - self.from.0).max(f64::MIN_POSITIVE);
        self.to.0 + (v - self.from.0) / span * (self.to.1 - self.to.0)
    }
}

/// About `n` round tick values covering 0..=max.
pub fn ticks(max: f64, n: usize) -> Vec<f64> {
    if max <= 0.0 {
        return vec![0.0];
    }
    let raw = max / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    (0..)
        .map(|i| i as f64 * step)
        .take_while(|v| *v <= max * 1.0001)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(ticks(10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(0.0, 5), vec![0.0]);
        assert_eq!(ticks(42.0, 4).last(), Some(&40.0));
    }

    #[test]
    fn text_is_escaped() {
        let mut s = Svg::new(10.0, 10.0);
        s.text(0.0, 0.0, "start", "t", "<GET /a?b=1&c>");
        let out = s.finish("x");
        assert!(out.contains("&lt;GET /a?b=1&amp;c&gt;"));
    }
}
