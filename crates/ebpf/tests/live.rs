//! The eBPF source on this kernel: this test process traces itself while
//! two of its threads talk over loopback TCP, and every call must come back
//! with its thread, its socket, its whole byte count and its payload.
//! Needs root (or CAP_BPF and CAP_PERFMON): skipped with a printed reason
//! elsewhere, a failure where WHYSLOW_REQUIRE_EBPF=1 (CI).

#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use whyslow_ebpf::{read_events, Cgroup, Filter, Kind, Payloads, Processes, Tracer};

/// An events file kept in memory, shared with the reader thread.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn start(filter: &Filter, out: Shared) -> Option<Tracer> {
    match Tracer::start(filter, out) {
        Ok(t) => Some(t),
        Err(why) if std::env::var_os("WHYSLOW_REQUIRE_EBPF").is_none() => {
            eprintln!("skipped: {why}");
            None
        }
        Err(why) => panic!("WHYSLOW_REQUIRE_EBPF=1 and {why}"),
    }
}

fn gettid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::gettid() as u32 }
}

#[test]
fn each_socket_call_comes_back_with_its_thread_bytes_and_payload() {
    let out = Shared::default();
    let Some(tracer) = start(
        &Processes::Pids(vec![std::process::id()]).into(),
        out.clone(),
    ) else {
        return;
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let big = vec![b'x'; 100_000];
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"PING");
        s.write_all(b"PONG").unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap();
        (gettid(), rest.len())
    });
    let client_tid = gettid();
    let mut c = TcpStream::connect(addr).unwrap();
    let client_addr = c.local_addr().unwrap();
    c.write_all(b"PING").unwrap();
    let mut buf = [0u8; 4];
    c.read_exact(&mut buf).unwrap();
    c.write_all(&big).unwrap();
    drop(c);
    let (server_tid, got) = server.join().unwrap();
    assert_eq!(got, big.len());
    let stats = tracer.stop().unwrap();
    let bytes = out.0.lock().unwrap().clone();
    let read = read_events(&bytes[..], 1 << 20, Payloads::All).unwrap();
    assert!(read.error.is_none(), "{:?}", read.error);
    assert_eq!(stats.lost, 0);
    assert_eq!(stats.events, read.events.len() as u64);
    let on = |kind: Kind, local| {
        read.events
            .iter()
            .filter(move |e| e.kind == kind && e.local == Some(local))
    };
    let ping: Vec<_> = on(Kind::Send, client_addr).collect();
    assert_eq!(ping[0].thread.tid, client_tid);
    assert_eq!(ping[0].thread.pid, std::process::id());
    assert_eq!(
        (ping[0].payload.as_slice(), ping[0].remote),
        (&b"PING"[..], Some(addr))
    );
    // The big write: whole byte count, payload cut at the bound.
    let sent: u64 = ping.iter().skip(1).map(|e| e.bytes).sum();
    assert_eq!(sent, big.len() as u64);
    assert!(ping[1..].iter().all(|e| e.payload.len() <= 4096));
    let served: Vec<_> = on(Kind::Receive, addr).collect();
    assert_eq!(served[0].thread.tid, server_tid);
    assert_eq!(served[0].payload, b"PING");
    let received: u64 = served.iter().map(|e| e.bytes).sum();
    assert_eq!(received, 4 + big.len() as u64);
    let pong: Vec<_> = on(Kind::Send, addr).collect();
    assert_eq!((pong.len(), pong[0].payload.as_slice()), (1, &b"PONG"[..]));
    // The server thread's start was seen, with this thread as its parent.
    assert!(read
        .events
        .iter()
        .any(|e| e.kind == Kind::NewThread { parent: client_tid } && e.thread.tid == server_tid));
    // Its end too, after its last call.
    let last_served = served.last().unwrap().exit_ns;
    assert!(read.events.iter().any(|e| e.kind == Kind::ThreadEnd
        && e.thread.tid == server_tid
        && e.enter_ns >= last_served));
    // And sequence numbers follow the bytes: the big write began 4 bytes
    // after PING's first byte.
    assert_eq!(ping[1].seq, ping[0].seq.wrapping_add(4));
}

/// A self-signed certificate and key in a fresh directory (openssl req).
fn certificate() -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("whyslow-ebpf-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let ok = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "openssl req");
    (cert, key)
}

#[test]
fn openssl_plaintext_comes_back_on_its_socket_with_its_thread() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let (cert, key) = certificate();
    let app = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apps/tls_pair.py");
    let mut child = Command::new("python3")
        .arg(app)
        .args([&cert, &key])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let out = Shared::default();
    let Some(tracer) = start(&Processes::Pids(vec![child.id()]).into(), out.clone()) else {
        let _ = child.kill();
        let _ = child.wait();
        return;
    };
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let said: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(child.wait().unwrap().success());
    let stats = tracer.stop().unwrap();
    assert!(
        stats.tls_hooked.iter().any(|p| p.contains("libssl")),
        "{stats:?}"
    );
    let bytes = out.0.lock().unwrap().clone();
    let read = read_events(&bytes[..], 1 << 20, Payloads::All).unwrap();
    let port = |k: &str| said[k].as_u64().unwrap() as u16;
    let tid = |k: &str| said[k].as_u64().unwrap() as u32;
    let plain = |kind: Kind, local_port: u16| -> Vec<_> {
        read.events
            .iter()
            .filter(|e| e.kind == kind && e.local.map(|a| a.port()) == Some(local_port))
            .collect()
    };
    let sent = plain(Kind::TlsSend, port("client_port"));
    let got = plain(Kind::TlsReceive, port("server_port"));
    let paths = |v: &[&whyslow_ebpf::SockEvent]| -> Vec<String> {
        v.iter()
            .map(|e| String::from_utf8_lossy(&e.payload[..12]).into_owned())
            .collect()
    };
    assert_eq!(paths(&sent), ["GET /first H", "GET /second "]);
    assert_eq!(paths(&got), paths(&sent));
    assert!(sent.iter().all(|e| e.thread.tid == tid("client_tid")));
    assert!(got.iter().all(|e| e.thread.tid == tid("server_tid")));
    assert!(sent
        .iter()
        .all(|e| e.remote.map(|a| a.port()) == Some(port("server_port"))));
    let answers = plain(Kind::TlsSend, port("server_port"));
    assert_eq!(answers.len(), 2);
    assert!(answers
        .iter()
        .all(|e| e.bytes == 40 && e.payload.ends_with(b"ok")));
    // The ciphertext went through the socket calls nested in them.
    assert!(!plain(Kind::Send, port("client_port")).is_empty());
}

/// Accepts `n` connections on `listener`, each read to its end.
fn read_each(listener: TcpListener, n: usize) -> std::thread::JoinHandle<Vec<Vec<u8>>> {
    std::thread::spawn(move || {
        (0..n)
            .map(|_| {
                let (mut s, _) = listener.accept().unwrap();
                let mut got = Vec::new();
                s.read_to_end(&mut got).unwrap();
                got
            })
            .collect()
    })
}

/// The events of a run, decoded.
fn events_of(tracer: Tracer, out: &Shared) -> Vec<whyslow_ebpf::SockEvent> {
    tracer.stop().unwrap();
    let bytes = out.0.lock().unwrap().clone();
    let read = read_events(&bytes[..], 1 << 20, Payloads::All).unwrap();
    assert!(read.error.is_none(), "{:?}", read.error);
    read.events
}

#[test]
fn a_port_filter_keeps_the_calls_of_sockets_on_its_ports_only() {
    let (a, b) = (
        TcpListener::bind("127.0.0.1:0").unwrap(),
        TcpListener::bind("127.0.0.1:0").unwrap(),
    );
    let (port_a, port_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    let out = Shared::default();
    let filter = Filter {
        processes: Processes::Pids(vec![std::process::id()]),
        ports: vec![port_a.port()],
    };
    let Some(tracer) = start(&filter, out.clone()) else {
        return;
    };
    let (got_a, got_b) = (read_each(a, 1), read_each(b, 1));
    TcpStream::connect(port_a)
        .unwrap()
        .write_all(b"TO-A")
        .unwrap();
    TcpStream::connect(port_b)
        .unwrap()
        .write_all(b"TO-B")
        .unwrap();
    assert_eq!(got_a.join().unwrap(), vec![b"TO-A".to_vec()]);
    assert_eq!(got_b.join().unwrap(), vec![b"TO-B".to_vec()]);
    let events = events_of(tracer, &out);
    let on = |port: u16| {
        events
            .iter()
            .filter(|e| {
                e.local.map(|a| a.port()) == Some(port) || e.remote.map(|a| a.port()) == Some(port)
            })
            .count()
    };
    assert!(
        on(port_a.port()) >= 2,
        "the send and the read on A: {events:?}"
    );
    assert_eq!(on(port_b.port()), 0, "{events:?}");
}

#[test]
fn a_cgroup_filter_keeps_the_calls_of_its_processes_only() {
    let Ok(root) = Cgroup::named("/") else {
        assert!(
            std::env::var_os("WHYSLOW_REQUIRE_EBPF").is_none(),
            "no cgroup v2 hierarchy"
        );
        eprintln!("skipped: no cgroup v2 hierarchy");
        return;
    };
    let name = format!("whyslow-live-{}", std::process::id());
    let dir = root.dir.join(&name);
    if let Err(e) = std::fs::create_dir(&dir) {
        assert!(
            std::env::var_os("WHYSLOW_REQUIRE_EBPF").is_none(),
            "{}: {e}",
            dir.display()
        );
        eprintln!("skipped: {}: {e}", dir.display());
        return;
    }
    let cgroup = Cgroup::named(&format!("/{name}")).unwrap();
    assert_eq!(cgroup.level, 1);
    let out = Shared::default();
    let Some(tracer) = start(&Processes::Cgroup(cgroup).into(), out.clone()) else {
        std::fs::remove_dir(&dir).unwrap();
        return;
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = read_each(listener, 2);
    let send = |what: &str| {
        format!(
            "import socket; s = socket.create_connection(('127.0.0.1', {port})); \
             s.sendall(b'{what}'); s.close()"
        )
    };
    // The shell moves itself into the cgroup, then becomes Python.
    let procs = dir.join("cgroup.procs");
    let inside = std::process::Command::new("sh")
        .args([
            "-c",
            &format!("echo $$ > {} && exec python3 -c \"$0\"", procs.display()),
        ])
        .arg(send("INSIDE"))
        .status()
        .unwrap();
    let outside = std::process::Command::new("python3")
        .args(["-c", &send("OUTSIDE")])
        .status()
        .unwrap();
    assert!(inside.success() && outside.success());
    let mut payloads = got.join().unwrap();
    payloads.sort();
    assert_eq!(payloads, vec![b"INSIDE".to_vec(), b"OUTSIDE".to_vec()]);
    let events = events_of(tracer, &out);
    std::fs::remove_dir(&dir).unwrap();
    let sent: Vec<&[u8]> = events
        .iter()
        .filter(|e| e.kind == Kind::Send)
        .map(|e| e.payload.as_slice())
        .collect();
    assert_eq!(sent, vec![&b"INSIDE"[..]], "{events:?}");
    // This process read both, outside the cgroup: not traced.
    assert!(events.iter().all(|e| e.thread.pid != std::process::id()));
}
