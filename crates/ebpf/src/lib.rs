//! whyslow's eBPF source: every socket read and write of the traced
//! processes, with the process and thread that made it, filtered in the
//! kernel (`bpf/sockio.bpf.c`). Saved beside a capture as an events file
//! (`file`), joined to the exchanges read from packets (`join`), so each
//! call gains the thread that made it: exact attribution for servers that
//! handle a request on one thread. In Go processes the goroutine stands
//! for the thread (`gobin`: the uprobes on a Go binary).

pub mod cgroup;
pub mod event;
pub mod file;
pub mod gobin;
pub mod join;
pub mod lives;
#[cfg(all(target_os = "linux", feature = "load"))]
pub mod load;
#[cfg(all(target_os = "linux", feature = "load"))]
mod uprobes;

pub use cgroup::Cgroup;
pub use event::{decode, Kind, SockEvent};
pub use file::{events_path, read_events, EventsRead, EventsWriter, Payloads};
pub use join::{capture_us, ThreadIndex};
#[cfg(all(target_os = "linux", feature = "load"))]
pub use load::{Filter, Processes, TraceStats, Tracer};

/// One fuzz input through every decoder of this crate: as a ring buffer
/// record, as an events file, and the join's index over what it held.
pub fn fuzz(data: &[u8]) {
    let _ = decode(data);
    let _ = event::new_process(data);
    let _ = gobin::read(data);
    if let Ok(read) = read_events(data, 1 << 12, Payloads::All) {
        let _ = ThreadIndex::new(&read.events, read.clock_offset_ns);
    }
    let mut file = file::MAGIC.to_vec();
    file.extend_from_slice(&[0; 8]);
    file.extend_from_slice(data);
    let _ = read_events(&file[..], 1 << 12, Payloads::All);
}
