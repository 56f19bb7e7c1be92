//! Synthetic captures for tests: a client and a server exchanging TCP
//! segments, written as pcapng with the crate's own writer.
#![allow(dead_code)]

use etherparse::{PacketBuilder, TcpOptionElement};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use whyslow_wire::{LinkType, PcapngWriter};

/// A frame in, the frame to write out.
pub type Wrap = fn(&[u8]) -> Vec<u8>;

pub const CLIENT: [u8; 4] = [10, 0, 0, 1];
pub const SERVER: [u8; 4] = [10, 0, 0, 2];

#[derive(Default, Clone, Copy)]
pub struct Flags {
    pub syn: bool,
    pub ack: bool,
    pub fin: bool,
    pub rst: bool,
    pub psh: bool,
}

pub struct Sim {
    pub w: PcapngWriter<Vec<u8>>,
    pub now_us: u64,
    pub cport: u16,
    pub sport: u16,
    /// Next sequence number each side sends.
    pub cnext: u32,
    pub snext: u32,
    pub cwin: u16,
    pub swin: u16,
    pub packets: u64,
    /// Cut each written frame to this many bytes (snapshot length).
    pub snaplen: Option<usize>,
    /// Wraps each frame before it is written (a tunnel's encapsulation).
    pub wrap: Option<Wrap>,
}

impl Sim {
    pub fn new(cport: u16, sport: u16) -> Sim {
        Sim {
            w: PcapngWriter::new(Vec::new(), LinkType::ETHERNET, 65535).unwrap(),
            now_us: 1_700_000_000_000_000,
            cport,
            sport,
            cnext: 1000,
            snext: 5000,
            cwin: 65535,
            swin: 65535,
            packets: 0,
            snaplen: None,
            wrap: None,
        }
    }

    pub fn wait_ms(&mut self, ms: u64) {
        self.now_us += ms * 1000;
    }

    /// Writes one raw segment.
    #[allow(clippy::too_many_arguments)]
    pub fn raw(
        &mut self,
        from_client: bool,
        seq: u32,
        ack: u32,
        f: Flags,
        win: u16,
        payload: &[u8],
        wscale: Option<u8>,
    ) {
        let (src, dst, sp, dp) = if from_client {
            (CLIENT, SERVER, self.cport, self.sport)
        } else {
            (SERVER, CLIENT, self.sport, self.cport)
        };
        let mut b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4(src, dst, 64)
            .tcp(sp, dp, seq, win);
        if f.syn {
            b = b.syn();
        }
        if f.ack {
            b = b.ack(ack);
        }
        if f.fin {
            b = b.fin();
        }
        if f.rst {
            b = b.rst();
        }
        if f.psh {
            b = b.psh();
        }
        if let Some(s) = wscale {
            b = b.options(&[TcpOptionElement::WindowScale(s)]).unwrap();
        }
        let mut frame = Vec::with_capacity(b.size(payload.len()));
        b.write(&mut frame, payload).unwrap();
        if let Some(wrap) = self.wrap {
            frame = wrap(&frame);
        }
        let orig = frame.len() as u32;
        if let Some(n) = self.snaplen {
            frame.truncate(n);
        }
        self.w.write(self.now_us, &frame, orig).unwrap();
        self.packets += 1;
        self.now_us += 100;
    }

    pub fn syn(&mut self) {
        let f = Flags {
            syn: true,
            ..Default::default()
        };
        self.raw(true, self.cnext, 0, f, self.cwin, &[], Some(7));
        self.cnext += 1;
    }

    pub fn syn_ack(&mut self) {
        let f = Flags {
            syn: true,
            ack: true,
            ..Default::default()
        };
        self.raw(false, self.snext, self.cnext, f, self.swin, &[], Some(7));
        self.snext += 1;
    }

    pub fn handshake(&mut self) {
        self.syn();
        self.wait_ms(1);
        self.syn_ack();
        self.wait_ms(1);
        self.ack(true);
    }

    /// Pure ACK of everything the other side sent.
    pub fn ack(&mut self, from_client: bool) {
        let f = Flags {
            ack: true,
            ..Default::default()
        };
        let (seq, ack, win) = self.side(from_client);
        self.raw(from_client, seq, ack, f, win, &[], None);
    }

    fn side(&self, from_client: bool) -> (u32, u32, u16) {
        if from_client {
            (self.cnext, self.snext, self.cwin)
        } else {
            (self.snext, self.cnext, self.swin)
        }
    }

    /// Data segment at the sender's next sequence number; advances it.
    pub fn send(&mut self, from_client: bool, payload: &[u8]) -> u32 {
        let f = Flags {
            ack: true,
            psh: true,
            ..Default::default()
        };
        let (seq, ack, win) = self.side(from_client);
        self.raw(from_client, seq, ack, f, win, payload, None);
        self.advance(from_client, payload.len() as u32);
        seq
    }

    pub fn advance(&mut self, from_client: bool, n: u32) {
        if from_client {
            self.cnext = self.cnext.wrapping_add(n);
        } else {
            self.snext = self.snext.wrapping_add(n);
        }
    }

    /// Re-sends `payload` at `seq` (a retransmission when seq is old).
    pub fn send_at(&mut self, from_client: bool, seq: u32, payload: &[u8]) {
        let f = Flags {
            ack: true,
            psh: true,
            ..Default::default()
        };
        let (_, ack, win) = self.side(from_client);
        self.raw(from_client, seq, ack, f, win, payload, None);
    }

    /// One request and its answer: `request`, the server's `response` 10 ms
    /// later, the client's ACK of it.
    pub fn round_trip(&mut self, request: &[u8], response: &[u8]) {
        self.send(true, request);
        self.wait_ms(10);
        self.send(false, response);
        self.ack(true);
    }

    pub fn fin(&mut self, from_client: bool) {
        let f = Flags {
            ack: true,
            fin: true,
            ..Default::default()
        };
        let (seq, ack, win) = self.side(from_client);
        self.raw(from_client, seq, ack, f, win, &[], None);
        self.advance(from_client, 1);
    }

    pub fn rst(&mut self, from_client: bool) {
        let f = Flags {
            rst: true,
            ack: true,
            ..Default::default()
        };
        let (seq, ack, _) = self.side(from_client);
        self.raw(from_client, seq, ack, f, 0, &[], None);
    }

    pub fn bytes(self) -> Vec<u8> {
        self.w.into_inner()
    }
}

pub const GET: &[u8] = b"GET /items?id=42 HTTP/1.1\r\nHost: example\r\n\r\n";
pub const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";

/// Writes bytes to a temp file under the target dir; returns its path.
pub fn temp_file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("whyslow-wire-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// True when tests must not skip for lack of tshark or capture permission.
pub fn required() -> bool {
    std::env::var("WHYSLOW_REQUIRE_CAPTURE").as_deref() == Ok("1")
}

pub const MESSAGES: usize = 3;

/// A client sends MESSAGES HTTP requests on one connection; the server answers each.
pub fn exchange(port: u16, listener: TcpListener) {
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 1024];
        for _ in 0..MESSAGES {
            let mut got = Vec::new();
            while !got.ends_with(b"\r\n\r\n") {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0);
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .unwrap();
        }
    });
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut buf = [0u8; 1024];
    for i in 0..MESSAGES {
        write!(c, "GET /m/{i}?q=1 HTTP/1.1\r\nHost: lo\r\n\r\n").unwrap();
        let mut got = Vec::new();
        while !got.ends_with(b"ok") {
            let n = c.read(&mut buf).unwrap();
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
    }
    drop(c);
    server.join().unwrap();
}

/// A live capture of `exchange` on `lo`: (port, file, stats), or None when
/// capture is not permitted here (a failure instead under WHYSLOW_REQUIRE_CAPTURE=1).
#[allow(dead_code)]
pub fn capture_loopback_exchange(
    name: &str,
) -> Option<(u16, std::path::PathBuf, whyslow_wire::CaptureStats)> {
    use whyslow_wire::{LiveCapture, WireError};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let path = temp_file(name, b"");
    let handle = match LiveCapture::spawn("lo", &[port], &path) {
        Ok(h) => h,
        Err(WireError::PermissionDenied) if !required() => {
            eprintln!("skipped: live capture needs CAP_NET_RAW");
            return None;
        }
        Err(e) => panic!("live capture failed: {e}"),
    };
    exchange(port, listener);
    // Let the last packets reach the ring before stopping.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let stats = handle.stop().unwrap();
    Some((port, path, stats))
}
