//! A capture taken under an overlay network, as on a Kubernetes node whose
//! pods talk over VXLAN: two network namespaces joined by a veth pair, the
//! kernel's own VXLAN between them (on the IANA port, and on Linux's default
//! port, which flannel keeps), Python's HTTP server on one side and curl on
//! the other. tcpdump on the veth sees only encapsulated packets; whyslow
//! reads the HTTP exchanges inside them as tshark's VXLAN dissector does, and
//! says they came in a tunnel. (GRE, Geneve and ERSPAN are read by the wire
//! crate's unit tests, from their RFCs' layouts.)

mod common;
use common::netns::*;
use common::real::*;
use common::*;
use serde_json::Value;

/// Requests curl makes through the tunnel; Python's server closes each
/// connection after its answer (HTTP/1.0), so as many connections.
const REQUESTS: usize = 12;
const SERVER: &str = "10.201.0.2";

/// A veth pair between `a` and `b` and a VXLAN over it on UDP `port`:
/// underlay 10.200.0.0/24, overlay 10.201.0.0/24 (.1 in `a`, .2 in `b`).
fn vxlan(a: &Netns, b: &Netns, port: u16) {
    let ok = |ns: &Netns, args: &[&str]| {
        let out = ns.command("ip").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // IPv4 only: IPv6's own chatter on new links (router solicitations,
    // multicast reports) would only add packets nobody asked for.
    for ns in [a, b] {
        let off = "for c in all default; do echo 1 > /proc/sys/net/ipv6/conf/$c/disable_ipv6; done";
        let out = ns.command("sh").args(["-c", off]).output().unwrap();
        assert!(
            out.status.success(),
            "{off}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    ok(
        a,
        &[
            "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", &b.name,
        ],
    );
    for (ns, dev, me, peer) in [(a, "va", "1", "2"), (b, "vb", "2", "1")] {
        let under = |h: &str| format!("10.200.0.{h}");
        ok(
            ns,
            &["addr", "add", &format!("{}/24", under(me)), "dev", dev],
        );
        ok(ns, &["link", "set", dev, "up"]);
        ok(
            ns,
            &[
                "link",
                "add",
                "vx0",
                "type",
                "vxlan",
                "id",
                "42",
                "dstport",
                &port.to_string(),
                "remote",
                &under(peer),
                "local",
                &under(me),
                "dev",
                dev,
            ],
        );
        ok(
            ns,
            &["addr", "add", &format!("10.201.0.{me}/24"), "dev", "vx0"],
        );
        ok(ns, &["link", "set", "vx0", "up"]);
    }
}

/// A process in a namespace, killed when dropped.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn curl(a: &Netns, urls: &[String]) -> bool {
    a.command("curl")
        .args(["-sf", "-o", "/dev/null", "--max-time", "5"])
        .args(urls)
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn http_inside_vxlan_is_read_as_tshark_reads_it() {
    let _one = serial();
    let test = "tunnels_vxlan";
    if !netns_allowed(test)
        || !capture_allowed(test)
        || !needed(test, "tcpdump", have("tcpdump"))
        || !needed(test, "tshark", have("tshark"))
        || !needed(test, "curl", have("curl"))
        || !needed(test, "python3", have("python3"))
    {
        return;
    }
    let dir = tmpdir(test);
    std::fs::write(dir.join("page"), "a page\n").unwrap();
    for port in [4789u16, 8472] {
        let (a, b) = (Netns::new("vxa"), Netns::new("vxb"));
        vxlan(&a, &b, port);
        let _server = Stopped(
            b.command("python3")
                .args(["-m", "http.server", "--bind", SERVER, "8080", "--directory"])
                .arg(&dir)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        let url = format!("http://{SERVER}:8080/page");
        let up = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            curl(&a, std::slice::from_ref(&url))
        });
        assert!(up, "the server answers through the tunnel");
        let file = dir.join(format!("vxlan-{port}.pcap"));
        let urls = vec![url; REQUESTS];
        let mut done = false;
        let dropped = tcpdump_on(
            a.command("tcpdump"),
            "va",
            &file,
            &format!("udp port {port}"),
            || done = curl(&a, &urls),
        );
        assert!(done, "curl through the tunnel");
        assert_eq!(dropped, 0, "tcpdump dropped packets");

        let run = whyslow(&["analyze", "--json", "--timeline", file.to_str().unwrap()]);
        assert!(run.status.success(), "{}", stderr(&run));
        let report = json(&run);
        let capture = &report["capture"];
        // Every packet of the file came in the tunnel and was opened, ARP
        // between the overlay's ends included.
        assert_eq!(
            capture["tunnels"],
            serde_json::json!([{"tunnel": "VXLAN", "packets": capture["packets"], "opened": true}]),
            "{capture}"
        );
        let decode_as = format!("udp.port=={port},vxlan");
        // Inside the tunnel, what is not TCP (the overlay's ARP) is counted.
        let not_tcp = tshark_fields(&file, &decode_as, "!tcp", "frame.number");
        assert_eq!(capture["non_tcp_packets"], not_tcp.len(), "{capture}");
        let tshark_requests = tshark_fields(&file, &decode_as, "http.request", "http.request.uri");
        assert_eq!(tshark_requests.len(), REQUESTS, "tshark reads the tunnel");
        let exchanges: Vec<&Value> = report["timeline"]["exchanges"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["request"] == "GET /page" && e["status"]["http"] == 200)
            .collect();
        assert_eq!(exchanges.len(), tshark_requests.len(), "{port}");
        let streams = tshark_fields(
            &file,
            &decode_as,
            "tcp.flags.syn==1 && tcp.flags.ack==0",
            "tcp.stream",
        );
        assert_eq!(
            capture["connections"].as_u64(),
            Some(streams.len() as u64),
            "{capture}"
        );
        let text = whyslow(&["analyze", file.to_str().unwrap()]);
        let expected = format!(
            "{} packet(s) read inside tunnels: VXLAN",
            capture["packets"]
        );
        assert!(stdout(&text).contains(&expected), "{}", stdout(&text));
    }
}
