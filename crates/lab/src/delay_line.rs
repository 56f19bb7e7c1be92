//! A slow link between two hosts of the lab: two TAP devices, each frame
//! one reads handed to the other after a fixed delay. Kernels without
//! netem (sch_netem) have no other way to make a link slow; a proxy would
//! end the TCP connections it carries, and the hosts' captures would no
//! longer share them. The devices are made in the caller's network
//! namespace and may be moved to others (`ip link set NAME netns NS`): the
//! open descriptors go on carrying their frames.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// `TUNSETIFF`: _IOW('T', 202, int), from linux/if_tun.h.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// A TAP device, frames without the 4-byte packet information header.
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
/// `struct ifreq`: a 16-byte name, then a union of which flags is the
/// first short; 40 bytes on 64-bit Linux.
const IFREQ_LEN: usize = 40;
/// A frame read at most: TAP devices hand whole frames up to their MTU,
/// without offloads (no IFF_VNET_HDR), so 64 KiB holds any.
const MAX_FRAME: usize = 65_536;
/// Frames in flight on one direction at most: past it the reader waits,
/// and the link's queue is full (bounded memory at any rate).
const MAX_IN_FLIGHT: usize = 4_096;

/// Opens (creating) TAP device `name` in this network namespace.
pub fn open_tap(name: &str) -> io::Result<File> {
    if name.is_empty() || name.len() >= 16 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?}: a device name is 1 to 15 bytes"),
        ));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")?;
    let mut req = [0u8; IFREQ_LEN];
    req[..name.len()].copy_from_slice(name.as_bytes());
    req[16..18].copy_from_slice(&(IFF_TAP | IFF_NO_PI).to_ne_bytes());
    // SAFETY: TUNSETIFF reads and writes a `struct ifreq`, which `req` is
    // laid out as and large enough for; the descriptor is open.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, req.as_mut_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// `whyslow lab link`: devices `a` and `b` made, `ready` told so, then
/// frames carried until the process is stopped.
pub fn link(a: &str, b: &str, delay: Duration, ready: &mut dyn FnMut(&str)) -> Result<(), String> {
    let opened = open_tap(a).and_then(|ta| Ok((ta, open_tap(b)?)));
    let (ta, tb) = opened
        .map_err(|e| format!("cannot make TAP devices {a} and {b}: {e} (needs CAP_NET_ADMIN)"))?;
    let each = whyslow_model::fmt_ms(delay.as_micros() as u64);
    ready(&format!("ready: {a} <-> {b}, {each} each way"));
    carry(ta, tb, delay).map_err(|e| format!("link: {e}"))
}

/// Carries frames between `a` and `b`, each way `delay` late, until the
/// process ends (a read error ends that direction).
pub fn carry(a: File, b: File, delay: Duration) -> io::Result<()> {
    let (a2, b2) = (a.try_clone()?, b.try_clone()?);
    let one = std::thread::spawn(move || one_way(a, b2, delay));
    let other = std::thread::spawn(move || one_way(b, a2, delay));
    let first = one.join().unwrap_or(Ok(()));
    let second = other.join().unwrap_or(Ok(()));
    first.and(second)
}

/// Frames read from `from`, written to `to` `delay` after they were read:
/// the reader stamps them and a writer waits out each one's time, so the
/// delay holds whatever the rate, and their order is kept.
fn one_way(mut from: File, mut to: File, delay: Duration) -> io::Result<()> {
    let (tx, rx) = mpsc::sync_channel::<(Instant, Vec<u8>)>(MAX_IN_FLIGHT);
    let writer = std::thread::spawn(move || {
        for (due, frame) in rx {
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            // A frame the device refuses (it went down) is lost, as on a link.
            let _ = to.write(&frame);
        }
    });
    let mut buf = vec![0u8; MAX_FRAME];
    let outcome = loop {
        match from.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => {
                if tx
                    .send((Instant::now() + delay, buf[..n].to_vec()))
                    .is_err()
                {
                    break Ok(());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => break Err(e),
        }
    };
    drop(tx);
    let _ = writer.join();
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_too_long_for_a_device_is_refused_before_opening_anything() {
        let e = open_tap("a-name-far-too-long").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
