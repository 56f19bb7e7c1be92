//! AF_PACKET socket with a TPACKET_V3 receive ring (see the kernel's
//! Documentation/networking/packet_mmap.rst). All unsafe code of live
//! capture is here.

use super::bpf::SockFilter;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};

/// Ring geometry: blocks of 1 MiB, 32 of them on a network interface: at
/// 1 Gbit/s that is ~250 ms of traffic buffered while the reader is busy
/// (writing the file).
const BLOCK_SIZE: u32 = 1 << 20;
pub const BLOCK_COUNT: u32 = 32;
/// On loopback (and "any", which includes it) 128: segments are up to
/// 64 KiB and move at several GB/s, so a 16 MiB Redis value and its reply
/// arrive within milliseconds; 32 MiB of ring lost ~40 packets to such a
/// burst, 128 MiB holds four of them.
pub const LOOPBACK_BLOCK_COUNT: u32 = 128;
/// Nominal frame size; TPACKET_V3 packs packets of any size into blocks,
/// but the kernel still checks frame_nr = blocks × block_size / frame_size.
const FRAME_SIZE: u32 = 2048;
/// A block is handed to user space after this many ms even when not full,
/// so packets of a quiet connection are not held back for long.
pub const BLOCK_TIMEOUT_MS: u32 = 20;

/// linux/if_packet.h constants.
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const TPACKET_V3: libc::c_int = 2;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
/// SO_ATTACH_FILTER (asm-generic/socket.h).
const SO_ATTACH_FILTER: libc::c_int = 26;

/// Offsets in struct tpacket_block_desc / tpacket_hdr_v1 (linux/if_packet.h).
const BD_BLOCK_STATUS: usize = 8;
const BD_NUM_PKTS: usize = 12;
const BD_OFFSET_TO_FIRST: usize = 16;
/// Offsets in struct tpacket3_hdr.
const H_NEXT_OFFSET: usize = 0;
const H_SEC: usize = 4;
const H_NSEC: usize = 8;
const H_SNAPLEN: usize = 12;
const H_LEN: usize = 16;
const H_MAC: usize = 24;
/// struct sockaddr_ll follows the header at TPACKET_ALIGN(sizeof(tpacket3_hdr)) = 48;
/// sll_ifindex is at +4, sll_pkttype at +10.
const H_SLL_IFINDEX: usize = 48 + 4;
const H_SLL_PKTTYPE: usize = 48 + 10;

#[repr(C)]
struct TpacketReq3 {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}

#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const SockFilter,
}

#[repr(C)]
#[derive(Default)]
struct TpacketStatsV3 {
    packets: u32,
    drops: u32,
    freeze_q_cnt: u32,
}

/// One received packet, borrowed from the ring.
pub struct RawPacket<'a> {
    pub sec: u32,
    pub nsec: u32,
    pub data: &'a [u8],
    pub len: u32,
    pub ifindex: i32,
    pub pkttype: u8,
}

pub struct Ring {
    fd: OwnedFd,
    map: NonNull<u8>,
    map_len: usize,
    block: u32,
    /// Blocks in the ring.
    blocks: u32,
    /// Next packet in the current block: (index, byte offset).
    cursor: Option<(u32, usize)>,
}

// The mapping is owned by this value only; moving it to another thread is fine.
unsafe impl Send for Ring {}

fn read_u32(p: *const u8) -> u32 {
    // SAFETY: callers pass 4-byte aligned pointers inside the mapping.
    unsafe { std::ptr::read_volatile(p.cast::<u32>()) }
}

fn last_err() -> io::Error {
    io::Error::last_os_error()
}

fn setsockopt<T>(fd: libc::c_int, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: v points to a live T of the given size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(last_err())
    } else {
        Ok(())
    }
}

impl Ring {
    /// Socket, filter and ring first, bind last: no unfiltered packet gets in.
    pub fn open(ifindex: i32, filter: &[SockFilter], blocks: u32) -> io::Result<Ring> {
        // Protocol 0: receives nothing until bound with ETH_P_ALL.
        // SAFETY: plain syscall.
        let raw =
            unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(last_err());
        }
        // SAFETY: raw is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();
        setsockopt(s, libc::SOL_PACKET, PACKET_VERSION, &TPACKET_V3)?;
        let prog = SockFprog {
            len: filter.len() as u16,
            filter: filter.as_ptr(),
        };
        setsockopt(s, libc::SOL_SOCKET, SO_ATTACH_FILTER, &prog)?;
        let req = TpacketReq3 {
            block_size: BLOCK_SIZE,
            block_nr: blocks,
            frame_size: FRAME_SIZE,
            frame_nr: BLOCK_SIZE / FRAME_SIZE * blocks,
            retire_blk_tov: BLOCK_TIMEOUT_MS,
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        setsockopt(s, libc::SOL_PACKET, PACKET_RX_RING, &req)?;
        let map_len = BLOCK_SIZE as usize * blocks as usize;
        // SAFETY: maps the ring the kernel just allocated for this socket.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                s,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(last_err());
        }
        let ring = Ring {
            fd,
            map: NonNull::new(p.cast()).ok_or_else(last_err)?,
            map_len,
            block: 0,
            blocks,
            cursor: None,
        };
        ring.bind(ifindex)?;
        Ok(ring)
    }

    fn bind(&self, ifindex: i32) -> io::Result<()> {
        // SAFETY: sockaddr_ll is plain data; zeroed is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex;
        // SAFETY: sll is a valid sockaddr_ll.
        let r = unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            Err(last_err())
        } else {
            Ok(())
        }
    }

    fn block_ptr(&self, b: u32) -> *mut u8 {
        // SAFETY: b < self.blocks, so the offset is inside the mapping.
        unsafe { self.map.as_ptr().add((b * BLOCK_SIZE) as usize) }
    }

    /// Next packet, waiting up to `timeout_ms` for one.
    pub fn next(&mut self, timeout_ms: i32) -> io::Result<Option<RawPacket<'_>>> {
        loop {
            let blk = self.block_ptr(self.block);
            // SAFETY: in-mapping offsets of the block descriptor.
            let status = read_u32(unsafe { blk.add(BD_BLOCK_STATUS) });
            if status & TP_STATUS_USER == 0 {
                if !self.wait(timeout_ms)? {
                    return Ok(None);
                }
                continue;
            }
            fence(Ordering::Acquire);
            // SAFETY: as above.
            let num = read_u32(unsafe { blk.add(BD_NUM_PKTS) });
            let (i, off) = match self.cursor {
                Some(c) => c,
                None => (0, read_u32(unsafe { blk.add(BD_OFFSET_TO_FIRST) }) as usize),
            };
            if i >= num || off >= BLOCK_SIZE as usize {
                self.release_block(blk);
                continue;
            }
            // SAFETY: the block is ours (TP_STATUS_USER) until released.
            let pkt = unsafe { Self::packet_at(blk, off) };
            let next = read_u32(unsafe { blk.add(off + H_NEXT_OFFSET) }) as usize;
            self.cursor = Some((i + 1, off + next));
            return Ok(pkt);
        }
    }

    /// # Safety
    /// `blk` is a block owned by user space; the packet stays valid until
    /// the block is released, which the caller's borrow of the ring prevents.
    unsafe fn packet_at<'a>(blk: *mut u8, off: usize) -> Option<RawPacket<'a>> {
        // SAFETY: `off` came from the kernel's block layout within BLOCK_SIZE;
        // lengths are checked against the block end before slicing.
        unsafe {
            let h = blk.add(off);
            let mac = std::ptr::read_volatile(h.add(H_MAC).cast::<u16>()) as usize;
            let snap = read_u32(h.add(H_SNAPLEN)) as usize;
            if off + mac + snap > BLOCK_SIZE as usize {
                return None;
            }
            Some(RawPacket {
                sec: read_u32(h.add(H_SEC)),
                nsec: read_u32(h.add(H_NSEC)),
                len: read_u32(h.add(H_LEN)),
                ifindex: std::ptr::read_volatile(h.add(H_SLL_IFINDEX).cast::<i32>()),
                pkttype: std::ptr::read_volatile(h.add(H_SLL_PKTTYPE)),
                data: std::slice::from_raw_parts(h.add(mac), snap),
            })
        }
    }

    fn release_block(&mut self, blk: *mut u8) {
        fence(Ordering::Release);
        // SAFETY: status word of a block we own until this write.
        unsafe {
            std::ptr::write_volatile(blk.add(BD_BLOCK_STATUS).cast::<u32>(), TP_STATUS_KERNEL)
        };
        self.block = (self.block + 1) % self.blocks;
        self.cursor = None;
    }

    /// Waits for the socket to become readable; false on timeout.
    fn wait(&self, timeout_ms: i32) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN | libc::POLLERR,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        match r {
            r if r < 0 && last_err().kind() == io::ErrorKind::Interrupted => Ok(true),
            r if r < 0 => Err(last_err()),
            0 => Ok(false),
            _ => Ok(true),
        }
    }

    /// Packets the kernel dropped since the last call (PACKET_STATISTICS resets on read).
    pub fn drops(&self) -> io::Result<u64> {
        let mut st = TpacketStatsV3::default();
        let mut len = std::mem::size_of::<TpacketStatsV3>() as libc::socklen_t;
        // SAFETY: st and len are valid for the call.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                (&mut st as *mut TpacketStatsV3).cast(),
                &mut len,
            )
        };
        if r < 0 {
            return Err(last_err());
        }
        Ok(u64::from(st.drops))
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `open` mapped.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.map_len) };
    }
}
