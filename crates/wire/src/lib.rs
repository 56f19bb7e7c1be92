//! Packets in and out: pcap/pcapng reading and writing, live capture on
//! Linux (AF_PACKET), and TCP flow reconstruction into a `Timeline`.

mod analyze;
pub mod decode;
mod error;
pub mod flow;
pub mod fuzz;
#[cfg(target_os = "linux")]
pub mod live;
pub mod merged;
pub mod packet;
pub mod read;
pub mod reassembly;
pub mod scan;
pub mod tunnel;
pub mod write;

pub use analyze::{
    timeline_from_file, timeline_from_reader, windows_from_file, windows_from_files,
    windows_from_reader, AnalyzeOutcome, WindowSink,
};
pub use error::WireError;
pub use flow::plaintext::{EventsOnly, PlainChunk, PlaintextFeed};
pub use flow::{
    Bounds, FlowCounts, FlowOptions, FlowTable, Window, WindowPolicy, MIN_WINDOW_EXCHANGES,
};
#[cfg(target_os = "linux")]
pub use live::{capture_to_file, CaptureHandle, CaptureStats, LiveCapture};
pub use merged::Feed;
pub use packet::{LinkType, Packet};
pub use read::{read_packets, CaptureReader, ReadOutcome};
pub use write::PcapngWriter;
