//! whyslow's own probe, captured live against the broken post-stall proxy:
//! split writes without TCP_NODELAY stall client → server on every reused
//! request (~40 ms, Linux's TCP_DELACK_MIN); coalesced writes, or split writes
//! with TCP_NODELAY, do not.

mod common;
use common::*;

const REQUESTS: usize = 6;

fn capture_probe(port: u16, url: &str, pattern: &[&str]) -> serde_json::Value {
    let file = std::env::temp_dir().join(format!(
        "whyslow-cp-{}-{}.pcapng",
        std::process::id(),
        pattern.join("")
    ));
    let f = file.to_str().unwrap();
    let (p, n) = (port.to_string(), REQUESTS.to_string());
    let bin = env!("CARGO_BIN_EXE_whyslow");
    let mut args = vec![
        "capture",
        "-i",
        "lo",
        "-p",
        &p,
        "-w",
        f,
        "--",
        bin,
        "probe",
        "-n",
        &n,
        "-d",
        "{\"q\":1}",
    ];
    args.extend_from_slice(pattern);
    args.push(url);
    let out = whyslow(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = whyslow(&["analyze", "--json", "--timeline", f]);
    assert!(out.status.success(), "{}", stderr(&out));
    let _ = std::fs::remove_file(&file);
    json(&out)
}

#[test]
fn only_split_writes_without_nodelay_stall() {
    if !capture_allowed("only_split_writes_without_nodelay_stall") {
        return;
    }
    let s = whyslow_lab::find("post-stall").unwrap();
    let running = rt().block_on(s.start(false)).unwrap();
    let port = running.ports[0];

    let split = capture_probe(
        port,
        &running.url,
        &["--nodelay", "off", "--write", "split"],
    );
    assert_eq!(finding_kinds(&split), vec!["nagle_delayed_ack"]);
    let f = &split["findings"][0];
    // Every reused request stalls; the first rides on quick-ack mode.
    assert_eq!(
        f["occurrences"].as_u64().unwrap() as usize,
        REQUESTS - 1,
        "{f}"
    );
    let per = f["time_lost_per_occurrence_us"].as_u64().unwrap();
    assert!((30_000..=60_000).contains(&per), "{per} µs per stall");
    // The stalled segments travel client → server.
    let conn = &split["timeline"]["connections"][0];
    let first_packet = &f["evidence"][0]["packets"][0];
    let seg = conn["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| &s["packet"] == first_packet)
        .unwrap();
    assert_eq!(seg["direction"], "to_server");

    for fixed in [
        &["--nodelay", "off", "--write", "coalesced"][..],
        &["--nodelay", "on", "--write", "split"][..],
    ] {
        let report = capture_probe(port, &running.url, fixed);
        assert!(
            finding_kinds(&report).is_empty(),
            "{fixed:?}: {}",
            report["findings"]
        );
        assert_eq!(
            report["timeline"]["exchanges"].as_array().unwrap().len(),
            REQUESTS
        );
    }
}
