//! whyslow's eBPF source: every socket read and write of the traced
//! processes, with the process and thread that made it, filtered in the
//! kernel (`bpf/sockio.bpf.c`). Saved beside a capture as an events file
//! (`file`), joined to the exchanges read from packets (`join`), so each
//! call gains the thread that made it: exact attribution for servers that
//! handle a request on one thread.

pub mod event;
pub mod file;
pub mod join;
#[cfg(target_os = "linux")]
pub mod load;

pub use event::{decode, Kind, SockEvent};
pub use file::{read_events, EventsRead, EventsWriter};
pub use join::ThreadIndex;
#[cfg(target_os = "linux")]
pub use load::{Filter, TraceStats, Tracer};
