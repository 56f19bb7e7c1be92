//! Where the time went, per inbound request kind, as text: each part with
//! its share of the mean request, so that every millisecond has a place.

use crate::{fmt_ms, kinds_left, KINDS_SHOWN};
use std::fmt::Write;
use whyslow_model::TimeBreakdown;

fn line(out: &mut String, what: &str, us: u64, share: f64, note: &str) {
    let share = 100.0 * share;
    let _ = writeln!(
        out,
        "    {what:<34} {:>10} {share:>4.0} %{note}",
        fmt_ms(us)
    );
}

pub fn text(kinds: &[TimeBreakdown]) -> String {
    let mut out = String::new();
    if kinds.is_empty() {
        return out;
    }
    let _ = writeln!(out, "\nwhere the time went (mean per request):");
    for k in kinds.iter().take(KINDS_SHOWN) {
        let _ = writeln!(
            out,
            "  {} to {} ({} requests, {} each)",
            k.request,
            k.server,
            k.requests,
            fmt_ms(k.total_us)
        );
        line(
            &mut out,
            "in the service itself",
            k.server_us,
            k.server_share,
            "",
        );
        if k.queued_us > 0 {
            line(
                &mut out,
                "calls queued for a connection",
                k.queued_us,
                k.queued_share,
                "",
            );
        }
        if k.ambiguous_us > 0 {
            // Ambiguous calls: some of this time is the request's calls,
            // some other requests'; not the service's own either way.
            line(
                &mut out,
                "calls not told apart (ambiguous)",
                k.ambiguous_us,
                k.ambiguous_share,
                "",
            );
        }
        for b in &k.backing {
            let what = format!("→ {} {}", b.protocol.name(), b.server);
            let mut note = format!("   {:.1} calls per request", b.calls_per_request);
            // Where another host's capture held the callee's end.
            if let (Some(network), Some(server)) = (b.network_us, b.server_us) {
                note.push_str(&format!(
                    "; network {}, server {}",
                    whyslow_model::fmt_ms(network),
                    whyslow_model::fmt_ms(server)
                ));
            }
            line(&mut out, &what, b.critical_us, b.share, &note);
        }
        line(
            &mut out,
            "network (request and response)",
            k.network_us,
            k.network_share,
            "",
        );
    }
    kinds_left(&mut out, kinds.len());
    out
}
