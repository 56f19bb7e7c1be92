use std::io;

/// Errors of reading, writing and capturing packets.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("not a pcap or pcapng capture file")]
    NotACapture,
    #[error(
        "capture file truncated after {packets} packets (last block incomplete at byte {offset})"
    )]
    Truncated { offset: u64, packets: u64 },
    #[error("capture file corrupt at byte {offset} after {packets} packets: {reason}")]
    Corrupt {
        offset: u64,
        packets: u64,
        reason: String,
    },
    /// Opening an AF_PACKET socket was refused: the process lacks CAP_NET_RAW.
    #[error(
        "live capture needs CAP_NET_RAW: run as root or `setcap cap_net_raw+ep` on the binary"
    )]
    PermissionDenied,
    #[error("no such network interface: {0}")]
    NoSuchInterface(String),
    #[error("live capture: {0}")]
    Live(String),
}

impl WireError {
    /// True when the error only means the capture ended early: what was read is usable.
    pub fn is_partial(&self) -> bool {
        matches!(
            self,
            WireError::Truncated { .. } | WireError::Corrupt { .. }
        )
    }
}
