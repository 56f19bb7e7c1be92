//! Services on several hosts (network namespaces), from apps/tiers.py:
//! starting a tier, capturing every host while a load runs, shifting a
//! host's capture as `editcap -t` does, and analyzing the hosts as one.

use super::netns::{Netns, NsServer};
use super::real::*;
use super::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tier of apps/tiers.py (`args`) in `ns`, once it accepts on
/// `addr`:`port`; killed when dropped.
pub fn tiers_app(ns: &Netns, args: &[&str], addr: &str, port: u16) -> NsServer {
    let mut cmd = ns.command(pypi_python().to_str().unwrap());
    cmd.arg("tiers.py")
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps"));
    NsServer::start_on(ns, &mut cmd, addr, port)
}

/// Whether `test` can run here: namespaces, tcpdump, editcap, capture
/// rights, requests and the `modules` of the PyPI Python, and `more`.
pub fn tiers_can_run(test: &str, modules: &[&str], more: &[Need<'static>]) -> bool {
    let mut needs = vec![Need::Tool("tcpdump"), Need::Tool("editcap"), Need::Capture];
    needs.extend_from_slice(more);
    super::netns::netns_allowed(test)
        && requirements_met(test, &needs)
        && std::iter::once(&"requests")
            .chain(modules)
            .all(|m| pypi_python_has(test, m))
}

/// Captures `hosts` (each namespace's `any` into its file) while `load`
/// runs; no packet dropped.
pub fn captured_on(hosts: &[(&Netns, &Path)], load: &mut dyn FnMut()) {
    match hosts.split_first() {
        None => load(),
        Some(((ns, file), rest)) => {
            let dropped = tcpdump_on(ns.command("tcpdump"), "any", file, "tcp", || {
                captured_on(rest, load)
            });
            assert_eq!(dropped, 0, "tcpdump dropped packets in {}", ns.name);
        }
    }
}

/// `requests` GETs of `url` from `clients` clients in `ns`, without trace
/// context (the hosts are joined by the wire alone).
pub fn load_in(ns: &Netns, clients: &str, requests: &str, url: &str) {
    let out = ns
        .command(env!("CARGO_BIN_EXE_whyslow"))
        .args(["load", "-c", clients, "-n", requests])
        .args(["--trace-context", "off", url])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

/// `from` with every timestamp moved `shift_us` later, as `editcap -t`.
pub fn shifted(from: &Path, to: &Path, shift_us: i64) {
    let secs = format!("{:.6}", shift_us as f64 / 1e6);
    let out = Command::new("editcap")
        .args(["-t", &secs])
        .arg(from)
        .arg(to)
        .output()
        .unwrap();
    assert!(out.status.success(), "editcap: {out:?}");
}

/// `analyze --json --timeline` of the hosts' `files`, the first the clock.
pub fn analyzed_hosts(files: &[PathBuf]) -> Value {
    let mut args = vec!["analyze", "--json", "--timeline"];
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    let out = whyslow(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    json(&out)
}

/// The calls of `front`'s request kinds to `api`, split into network and
/// server (µs per request), as the breakdown gives them.
pub fn split_of(report: &Value, front: &str, api: &str) -> (u64, u64) {
    let kinds = report["time_breakdown"].as_array().unwrap();
    let kind = kinds
        .iter()
        .find(|k| k["server"] == front)
        .unwrap_or_else(|| panic!("no breakdown of {front}: {kinds:?}"));
    let b = kind["backing"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["server"] == api)
        .unwrap_or_else(|| panic!("no backing {api}: {kind}"));
    let part = |name: &str| b[name].as_u64().unwrap_or_else(|| panic!("no {name}: {b}"));
    let (network, server) = (part("network_us"), part("server_us"));
    assert_eq!(network + server, part("critical_us"), "{b}");
    (network, server)
}

/// Host `i`'s clock (1…) recovered within the bound it reports, the bound
/// itself at most `max_bound_us`.
pub fn clock_placed(run: &str, report: &Value, i: usize, truth_us: i64, max_bound_us: u64) {
    let h = &report["capture"]["hosts"][i];
    let offset = h["clock_offset_us"]
        .as_i64()
        .unwrap_or_else(|| panic!("{run}: {h}"));
    let bound = h["clock_offset_bound_us"].as_u64().unwrap();
    eprintln!(
        "{run}: {} {offset} µs ± {bound} (shifted {truth_us})",
        h["name"]
    );
    assert!(offset.abs_diff(truth_us) <= bound, "{run}: {h}");
    assert!(bound <= max_bound_us, "{run}: {h}");
}
