//! Per-direction TCP sequence analysis, following Wireshark's "TCP
//! Analysis" (epan/dissectors/packet-tcp.c, tcp_analyze_sequence_number) so
//! that counts agree with `tshark -z expert` on the same capture.

/// Wireshark's fast-retransmission window: the resend must follow the last
/// duplicate ACK within 20 ms (packet-tcp.c).
const FAST_RETRANSMIT_WINDOW_US: u64 = 20_000;
/// Wireshark's out-of-order threshold when the handshake RTT is unknown: 3 ms
/// (tcp.analyze_sequence_numbers "ooo_thres" default).
const DEFAULT_OOO_THRESHOLD_US: u64 = 3_000;
/// Wireshark flags a fast retransmission after at least 2 duplicate ACKs.
const FAST_RETRANSMIT_DUP_ACKS: u32 = 2;

/// Sequence-space comparisons modulo 2^32 (RFC 9293 §3.4).
pub fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}
pub fn seq_gt(a: u32, b: u32) -> bool {
    seq_lt(b, a)
}

/// Wireshark's per-direction state (tcp_analyze_seq_info).
#[derive(Debug, Default, Clone)]
pub struct SeqState {
    /// Highest sequence number sent plus one ("nextseq").
    pub nextseq: Option<u32>,
    pub nextseq_at: u64,
    /// Last ACK number this side sent, and when.
    pub lastack: Option<u32>,
    pub lastack_at: u64,
    /// Last window this side advertised (scaled when known).
    pub window: Option<u32>,
    pub dup_acks: u32,
}

/// The facts of one segment the analysis needs.
#[derive(Debug, Clone, Copy)]
pub struct Seg {
    pub at_us: u64,
    pub seq: u32,
    pub ack: Option<u32>,
    pub len: u32,
    pub syn: bool,
    pub fin: bool,
    pub rst: bool,
    pub window: u32,
}

/// What the analysis says about one segment.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub retransmission: bool,
    pub fast_retransmission: bool,
    pub spurious: bool,
    pub out_of_order: bool,
    pub zero_window: bool,
    pub zero_window_probe: bool,
    pub keep_alive: bool,
    pub dup_ack: bool,
}

impl Verdict {
    /// Any kind of resent data, as counted in `DirectionStats::retransmissions`.
    pub fn resent(&self) -> bool {
        self.retransmission || self.fast_retransmission || self.spurious
    }
}

/// Classifies `s` sent by the side owning `fwd`, then updates `fwd`.
/// `ooo_threshold_us`: the handshake RTT when known (Wireshark uses it too).
pub fn analyze(
    fwd: &mut SeqState,
    rev: &SeqState,
    s: &Seg,
    ooo_threshold_us: Option<u64>,
) -> Verdict {
    let mut v = Verdict::default();
    let control = s.syn || s.fin || s.rst;
    v.zero_window_probe = s.len == 1 && fwd.nextseq == Some(s.seq) && rev.window == Some(0);
    v.zero_window = s.window == 0 && !control;
    v.keep_alive =
        s.len <= 1 && !control && fwd.nextseq.is_some_and(|n| s.seq == n.wrapping_sub(1));
    v.dup_ack = s.len == 0
        && s.window != 0
        && fwd.window == Some(s.window)
        && fwd.nextseq == Some(s.seq)
        && s.ack.is_some()
        && fwd.lastack == s.ack
        && !control;
    if (s.len > 0 || s.syn || s.fin) && !v.keep_alive && !v.zero_window_probe {
        classify_resend(&mut v, fwd, rev, s, ooo_threshold_us);
    }
    update(fwd, s, &v);
    v
}

fn classify_resend(v: &mut Verdict, fwd: &SeqState, rev: &SeqState, s: &Seg, ooo: Option<u64>) {
    let Some(nextseq) = fwd.nextseq else { return };
    let not_advanced = seq_lt(s.seq, nextseq);
    let end = s.seq.wrapping_add(s.len);
    if not_advanced
        && rev.dup_acks >= FAST_RETRANSMIT_DUP_ACKS
        && rev.lastack == Some(s.seq)
        && s.at_us.saturating_sub(rev.lastack_at) < FAST_RETRANSMIT_WINDOW_US
    {
        v.fast_retransmission = true;
    } else if not_advanced
        && s.at_us.saturating_sub(fwd.nextseq_at) < ooo.unwrap_or(DEFAULT_OOO_THRESHOLD_US)
        && nextseq != end
    {
        v.out_of_order = true;
    } else if s.len > 0 && rev.lastack.is_some_and(|a| !seq_gt(end, a)) {
        v.spurious = true;
    } else if not_advanced {
        v.retransmission = true;
    }
}

fn update(fwd: &mut SeqState, s: &Seg, v: &Verdict) {
    let mut next = s.seq.wrapping_add(s.len);
    if s.syn || s.fin {
        next = next.wrapping_add(1);
    }
    // A zero-window probe does not advance nextseq (Wireshark does the same).
    if !v.zero_window_probe && fwd.nextseq.is_none_or(|n| seq_gt(next, n)) {
        fwd.nextseq = Some(next);
        fwd.nextseq_at = s.at_us;
    }
    if let Some(ack) = s.ack {
        if v.dup_ack {
            fwd.dup_acks += 1;
        } else if fwd.lastack != Some(ack) {
            fwd.dup_acks = 0;
        }
        fwd.lastack = Some(ack);
        fwd.lastack_at = s.at_us;
    }
    fwd.window = Some(s.window);
}
