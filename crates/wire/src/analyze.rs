//! Capture file → `Timeline`, streaming: memory depends on the number of
//! connections and the limits, not on the file size.

use crate::decode::decode;
use crate::flow::FlowCounts;
use crate::flow::{Copies, FlowOptions, FlowTable, StreamEvents, Streams, Window, SERVICE_SAMPLE};
use crate::merged::{self, Feed};
use crate::packet::Packet;
use crate::read::{read_packets_buffered, ReadOutcome, INITIAL_BUFFER};
use crate::tunnel::Tunnel;
use crate::WireError;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::mpsc::sync_channel;
use whyslow_model::{Exchange, Timeline, TunnelPackets};

/// What analyzing a capture produced.
#[derive(Debug)]
pub struct AnalyzeOutcome {
    pub timeline: Timeline,
    pub packets: u64,
    pub non_tcp: u64,
    /// UDP datagrams that were not DNS: (the lower of their ports, packets),
    /// the most first; port 0 for every port past those counted.
    pub other_udp: Vec<(u16, u64)>,
    /// Packets in tunnels, opened or not.
    pub tunnels: Vec<TunnelPackets>,
    pub truncated_packets: u64,
    /// Packets the capturing tool says it dropped (pcapng interface
    /// statistics), when the file says.
    pub dropped_while_capturing: Option<u64>,
    /// Set when the file was cut or corrupt: the timeline is then partial.
    pub error: Option<String>,
    /// Protocol parse problems per connection (analysis of that stream stopped).
    pub protocol_errors: Vec<String>,
    /// Connections and exchanges seen in the capture, and those left out of
    /// the timeline by `Bounds::max_connections` / `max_exchanges`.
    pub connections_seen: u64,
    pub connections_dropped: u64,
    pub exchanges_seen: u64,
    pub exchanges_dropped: u64,
    /// Windowed analysis: windows handed out, and those whose cut was forced.
    pub windows: u64,
    pub windows_forced: u64,
    /// Flows closed early because `Bounds::max_flows` were open at once.
    pub evicted_flows: u64,
    /// Packets of connections closed and handed on long before: ignored.
    pub late_packets: u64,
}

/// Receives the windows of a capture, in capture order, each timeline sorted.
pub trait WindowSink {
    /// Ports of the service under investigation, decided from what finished
    /// before the first cut (empty: no service; every exchange stands alone),
    /// or None to wait for more. `last_chance`: the end of the capture, or
    /// `SERVICE_SAMPLE` exchanges waiting; the answer must then be Some.
    fn service_ports(&mut self, first: &Timeline, last_chance: bool) -> Option<Vec<u16>>;
    /// Takes from `window` what it keeps; the rest is dropped, and the
    /// emptied exchange vector goes back to the flow table for a later window.
    fn window(&mut self, window: &mut Window);
}

/// Reads a capture and hands its connections and exchanges to `sink` in
/// windows of `options.window.exchanges`: every exchange is analyzed, and
/// memory depends on the window and the open flows, not on the file.
/// `outcome.timeline` is empty: the timeline went to the sink.
pub fn windows_from_file(
    path: &Path,
    options: &FlowOptions,
    sink: &mut (dyn WindowSink + Send),
) -> Result<AnalyzeOutcome, WireError> {
    let reader = File::open(path)?;
    windows_from(
        |f| read_packets_buffered(reader, FILE_BUFFER, f),
        options,
        sink,
        Default::default(),
    )
}

/// As `windows_from_file`, from any reader.
pub fn windows_from_reader<R: Read + Send>(
    reader: R,
    options: &FlowOptions,
    sink: &mut (dyn WindowSink + Send),
) -> Result<AnalyzeOutcome, WireError> {
    windows_from(
        |f| read_packets_buffered(reader, INITIAL_BUFFER, f),
        options,
        sink,
        Default::default(),
    )
}

/// As `windows_from_file`, from the captures of several hosts read as one
/// (`merged::read`): each host's packets on the first one's clock, in time
/// order; of a connection two hosts captured, one copy read as the
/// connection and the other for the callee's times (`Feed::copies`).
pub fn windows_from_files(
    feeds: &[Feed],
    options: &FlowOptions,
    sink: &mut (dyn WindowSink + Send),
) -> Result<AnalyzeOutcome, WireError> {
    for feed in feeds {
        File::open(&feed.path)?;
    }
    let copies = feeds
        .iter()
        .flat_map(|f| f.copies.iter().map(|(&(a, b), &c)| ((a, b, f.host), c)))
        .collect();
    windows_from(|f| merged::read(feeds, f), options, sink, copies)
}

/// Windows queued for the sink's thread beyond the one it analyzes: none,
/// so at most two windows are in memory besides the flow table's.
const WINDOWS_IN_FLIGHT: usize = 0;
/// Emptied exchange vectors on their way back to the flow table. The same
/// two serve every window: a new one each time had to find room among the
/// small allocations made since, and peak RSS then differed by up to 10%
/// between runs of one file (Redis+PostgreSQL, 1.3 GB: 108–118 MB; reused:
/// 109–110 MB).
const VECTORS_BACK: usize = 2;

fn windows_from(
    source: impl FnOnce(&mut dyn FnMut(&Packet)) -> ReadOutcome + Send,
    options: &FlowOptions,
    sink: &mut (dyn WindowSink + Send),
    copies: Copies,
) -> Result<AnalyzeOutcome, WireError> {
    let mut table = FlowTable::windowed(options.clone());
    table.set_copies(copies);
    let (mut windows, mut forced) = (0u64, 0u64);
    // Once the service is decided, windows are analyzed on their own thread
    // while the next one is rebuilt: the two halves of the work overlap.
    let read = std::thread::scope(|s| {
        let mut deciding = Some(sink);
        let mut service: Option<Vec<u16>> = None;
        let mut analyzing = None;
        let mut cut = |table: &mut Streams, end: bool| {
            if let (None, Some(sink)) = (&service, deciding.as_mut()) {
                let last_chance = end
                    || table.waiting_exchanges() >= SERVICE_SAMPLE
                    || table.waiting_connections() >= SERVICE_SAMPLE;
                service = sink.service_ports(&table.peek(), last_chance);
                if last_chance && service.is_none() {
                    service = Some(Vec::new());
                }
                let Some(ports) = &service else {
                    return;
                };
                // Decided: a window may now need more of the service's requests.
                table.set_service(ports);
                if !end && !table.window_ready() {
                    return;
                }
            }
            let w = table.take_window();
            windows += 1;
            forced += u64::from(!w.exact);
            let (to_sink, emptied, _) = analyzing.get_or_insert_with(|| {
                let (tx, rx) = sync_channel::<Window>(WINDOWS_IN_FLIGHT);
                let (back, emptied) = sync_channel::<Vec<Exchange>>(VECTORS_BACK);
                let sink = deciding.take().expect("the sink is still here");
                (
                    tx,
                    emptied,
                    s.spawn(move || {
                        yield_to_the_other_threads();
                        for mut w in rx {
                            w.timeline.sort();
                            sink.window(&mut w);
                            let mut v = std::mem::take(&mut w.timeline.exchanges);
                            v.clear();
                            // Sent before the next window is taken in: the
                            // flow thread finds it when its send returns.
                            let _ = back.try_send(v);
                        }
                    }),
                )
            });
            // A send fails only when the sink's thread panicked; the join
            // below carries that panic on.
            let _ = to_sink.send(w);
            table.make_room(emptied.try_recv().ok());
        };
        let read = drive(source, &mut table, |table| {
            if table.window_ready() {
                cut(table, false);
            }
        });
        table.close_all();
        cut(table.streams(), true);
        if let Some((to_sink, _, thread)) = analyzing {
            drop(to_sink);
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
        read
    });
    let mut outcome = outcome_of(read, table, Timeline::default())?;
    outcome.windows = windows;
    outcome.windows_forced = forced;
    Ok(outcome)
}

/// Nice value of the thread that analyzes windows. The flow thread is the
/// slowest stage and the reader feeds it: on two cores the three threads
/// share, and a window's analysis that takes the reader's core for a time
/// slice left the flow thread waiting for packets (40–70 ms of a 0.85 s run
/// on a 285 MB Redis+PostgreSQL capture; 11 ms at nice 5). Eleven
/// alternating runs: wall 0.82 → 0.79 s, CPU time unchanged.
const ANALYSIS_NICE: i32 = 5;

/// Lowers the calling thread's priority to `ANALYSIS_NICE` (on Linux the
/// nice value is per thread: `who` 0 is the calling thread). It only ever
/// waits longer for a CPU; a failure changes nothing else.
fn yield_to_the_other_threads() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority takes plain integers and touches no memory of ours.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, ANALYSIS_NICE);
    }
}

/// Reads a pcap/pcapng file and rebuilds its TCP connections and exchanges.
/// Fails only when the file cannot be opened or is not a capture at all.
pub fn timeline_from_file(path: &Path, options: &FlowOptions) -> Result<AnalyzeOutcome, WireError> {
    // No BufReader: the capture reader reads into its own buffer.
    timeline_from(File::open(path)?, FILE_BUFFER, options)
}

/// Read buffer for files: a tenth of the reads and refills of the default
/// 64 KiB (each refill moves the partial block left over to the front).
const FILE_BUFFER: usize = 1 << 20;

/// As `timeline_from_file`, from any reader.
pub fn timeline_from_reader<R: Read + Send>(
    reader: R,
    options: &FlowOptions,
) -> Result<AnalyzeOutcome, WireError> {
    timeline_from(reader, INITIAL_BUFFER, options)
}

fn timeline_from<R: Read + Send>(
    reader: R,
    buffer: usize,
    options: &FlowOptions,
) -> Result<AnalyzeOutcome, WireError> {
    let mut table = FlowTable::new(options.clone());
    let read = drive(
        |f| read_packets_buffered(reader, buffer, f),
        &mut table,
        |_| {},
    );
    let timeline = table.take_timeline();
    outcome_of(read, table, timeline)
}

/// Feeds every packet of `reader` to `table`, calling `after_batch` after
/// each batch of packets, and ends every connection at the end.
///
/// Two threads: one reads the capture, decodes its packets' headers and
/// rebuilds connections and their in-order bytes (the table's TCP half);
/// the other runs the protocol analyzers on those bytes and keeps the
/// exchanges (its protocol half). What passes between them goes in small
/// batches, so memory stays bounded and the two halves of the work overlap.
fn drive(
    source: impl FnOnce(&mut dyn FnMut(&Packet)) -> ReadOutcome + Send,
    table: &mut FlowTable,
    mut after_batch: impl FnMut(&mut Streams),
) -> ReadOutcome {
    let (tcp, streams) = table.halves();
    std::thread::scope(|s| {
        let (full_tx, full_rx) = sync_channel::<StreamEvents>(BATCHES_IN_FLIGHT);
        let (free_tx, free_rx) = sync_channel::<StreamEvents>(BATCHES_IN_FLIGHT + 1);
        let reading = s.spawn(move || {
            let mut batch = StreamEvents::default();
            let outcome = source(&mut |p: &Packet| {
                tcp.host = p.host;
                let decoded = decode(p.link, &p.data);
                tcp.push_decoded(decoded, p.is_cut(), p.at_us, p.number, &mut batch);
                if batch.list.len() >= BATCH_EVENTS || batch.bytes.len() >= BATCH_BYTES {
                    let next = free_rx.try_recv().unwrap_or_default();
                    // A closed channel means the other side is gone: stop feeding it.
                    let _ = full_tx.send(std::mem::replace(&mut batch, next));
                }
            });
            // The end of the capture ends the connections still open.
            tcp.close_all(&mut batch);
            let _ = full_tx.send(batch);
            outcome
        });
        for mut batch in full_rx {
            streams.apply(&mut batch);
            let _ = free_tx.try_send(batch);
            after_batch(streams);
        }
        streams.close_events_only();
        streams.note_errors_dropped();
        reading
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// The outcome of a read whose flows are all closed.
fn outcome_of(
    read: ReadOutcome,
    table: FlowTable,
    timeline: Timeline,
) -> Result<AnalyzeOutcome, WireError> {
    let error = match read.error {
        Some(e @ (WireError::NotACapture | WireError::Io(_))) if read.packets_read == 0 => {
            return Err(e)
        }
        Some(e) => Some(e.to_string()),
        None => None,
    };
    let c = table.counters();
    Ok(AnalyzeOutcome {
        timeline,
        packets: c.packets,
        non_tcp: c.non_tcp,
        other_udp: table.other_udp(),
        tunnels: tunnels(&c),
        truncated_packets: c.truncated_packets,
        dropped_while_capturing: read.dropped_while_capturing,
        error,
        protocol_errors: table.errors().to_vec(),
        connections_seen: c.connections_seen,
        connections_dropped: c.connections_dropped,
        exchanges_seen: c.exchanges_seen,
        exchanges_dropped: c.exchanges_dropped,
        windows: 0,
        windows_forced: 0,
        evicted_flows: c.evicted_flows,
        late_packets: c.late_packets,
    })
}

/// Events per batch passed from the reading thread (about as many packets:
/// a packet with payload makes one, a pure ACK none): hand-overs, which may
/// wake a thread, stay rare.
const BATCH_EVENTS: usize = 2048;
/// Payload bytes per batch: big segments (TSO/GRO captures carry up to 64 KiB
/// per packet) close a batch before its event count does, so the memory in
/// flight stays near BATCHES_IN_FLIGHT × 1 MiB.
const BATCH_BYTES: usize = 1 << 20;
/// Batches queued between the threads: bounds the memory in flight.
const BATCHES_IN_FLIGHT: usize = 4;

/// The tunnels packets came in, opened first, each kind once.
fn tunnels(c: &FlowCounts) -> Vec<TunnelPackets> {
    let mut out = Vec::new();
    for (opened, packets) in [(true, &c.tunneled), (false, &c.tunnels_unopened)] {
        for t in Tunnel::ALL {
            if packets[t.index()] > 0 {
                out.push(TunnelPackets {
                    tunnel: t.name().to_string(),
                    packets: packets[t.index()],
                    opened,
                });
            }
        }
    }
    out
}
