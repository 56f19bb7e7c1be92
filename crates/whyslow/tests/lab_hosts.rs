//! The lab's scenarios on several hosts (`whyslow lab hosts`): each host a
//! network namespace, each service a process on its host, each host
//! captured apart by whyslow's own capture. The API's capture is shifted
//! +41 ms and the database's −7.5 ms (as `editcap -t` shifts them), and
//! `analyze` of the hosts' captures is held to each scenario's declared
//! truth: both offsets recovered within the bound reported, each bound
//! under the hop's round trip + 1 ms; three-tier names n_plus_one on the
//! database with the declared statements per front request, sequentially
//! and at 8 clients; slow-link names sequential_calls, the calls split
//! into network (≥ 80 %) and server, with the link's round trip; the
//! fixed variants name nothing.

mod common;
use common::netns::netns_allowed;
use common::real::*;
use common::tiers::*;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use whyslow_lab::hosts::{HostsScenario, SLOW_LINK, THREE_TIER};

const API_SHIFT_US: i64 = 41_000;
const DB_SHIFT_US: i64 = -7_500;
/// A veth hop's round trip is tens of µs: its bound is under a millisecond.
const VETH_BOUND_US: u64 = 1_000;
/// The network's least share of the slow link's calls: 20 ms of round
/// trip against well under a millisecond of the API's own.
const MIN_NETWORK_SHARE: f64 = 0.8;

fn can_run(test: &str) -> bool {
    netns_allowed(test) && requirements_met(test, &[Need::Tool("editcap"), Need::Capture])
}

/// `s` run with `clients` and `requests`, each host after the first
/// shifted by `shifts` (µs): the captures to analyze, host by host.
fn captured(
    s: &HostsScenario,
    fixed: bool,
    clients: &str,
    requests: &str,
    dir: &Path,
    shifts: &[i64],
) -> Vec<PathBuf> {
    let mut args = vec!["lab", "hosts", s.name, "-c", clients, "-n", requests];
    if fixed {
        args.push("--fixed");
    }
    let d = dir.to_str().unwrap().to_string();
    args.extend(["-w", &d]);
    let out = whyslow(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let files: Vec<PathBuf> = stdout(&out).lines().map(PathBuf::from).collect();
    assert_eq!(files.len(), s.hosts.len(), "{}", stdout(&out));
    let mut placed = vec![files[0].clone()];
    for (file, &shift) in files[1..].iter().zip(shifts) {
        let to = dir.join("shifted").join(file.file_name().unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        shifted(file, &to, shift);
        placed.push(to);
    }
    placed
}

fn fact(s: &HostsScenario, name: &str) -> u64 {
    s.truth.fact(name).unwrap()
}

/// The front's address and the address its calls go to, as the scenario says.
fn front_and_api(s: &HostsScenario) -> (String, String) {
    let listen = |host: usize| {
        s.services
            .iter()
            .find(|x| x.host == host)
            .unwrap()
            .listen
            .to_string()
    };
    (listen(0), listen(1))
}

/// The finding of `kind`, which must be the first cause named.
fn named_first<'a>(run: &str, report: &'a Value, kind: &str) -> &'a Value {
    let kinds = causes(report);
    assert_eq!(
        kinds.first().map(String::as_str),
        Some(kind),
        "{run}: {kinds:?}"
    );
    finding(report, kind).unwrap()
}

fn assert_nothing_named(run: &str, report: &Value) {
    let kinds = causes(report);
    assert!(kinds.is_empty(), "{run}: {kinds:?}");
}

#[test]
fn three_tier_lab_on_three_hosts() {
    let _one = serial();
    let test = "three_tier_lab_on_three_hosts";
    if !can_run(test) {
        return;
    }
    let s = &THREE_TIER;
    let dir = tmpdir(test);
    let db = s.services.iter().find(|x| x.host == 2).unwrap().listen;
    for fixed in [false, true] {
        for (clients, requests) in [("1", "30"), ("8", "160")] {
            let run = format!("{} fixed={fixed} at {clients} client(s)", s.name);
            let runs = dir.join(format!("{fixed}-{clients}"));
            let files = captured(
                s,
                fixed,
                clients,
                requests,
                &runs,
                &[API_SHIFT_US, DB_SHIFT_US],
            );
            let report = analyzed_hosts(&files);
            clock_placed(&run, &report, 1, API_SHIFT_US, VETH_BOUND_US);
            clock_placed(&run, &report, 2, DB_SHIFT_US, VETH_BOUND_US);
            if fixed {
                assert_nothing_named(&run, &report);
                continue;
            }
            let f = named_first(&run, &report, "n_plus_one");
            let per_request = format!("ran {} times per request", fact(s, "statements"));
            assert!(
                f["summary"].as_str().unwrap().contains(&per_request),
                "{run}: {f}"
            );
            let subject = f["subject"].as_str().unwrap();
            assert!(subject.starts_with(&format!("{db} ")), "{run}: {f}");
        }
    }
}

#[test]
fn slow_link_lab_on_two_hosts() {
    let _one = serial();
    let test = "slow_link_lab_on_two_hosts";
    if !can_run(test) {
        return;
    }
    let s = &SLOW_LINK;
    let dir = tmpdir(test);
    let round_trip = fact(s, "round_trip_us");
    let (front, api) = front_and_api(s);
    for fixed in [false, true] {
        let run = format!("{} fixed={fixed}", s.name);
        let runs = dir.join(format!("{fixed}"));
        let files = captured(s, fixed, "1", "15", &runs, &[API_SHIFT_US]);
        let report = analyzed_hosts(&files);
        clock_placed(&run, &report, 1, API_SHIFT_US, round_trip + 1_000);
        if fixed {
            assert_nothing_named(&run, &report);
            continue;
        }
        let f = named_first(&run, &report, "sequential_calls");
        let (network, server) = split_of(&report, &front, &api);
        let share = network as f64 / (network + server) as f64;
        assert!(
            share >= MIN_NETWORK_SHARE,
            "{run}: network {network} µs, server {server} µs"
        );
        let per_call = f["facts"]["network_per_call_us"].as_f64().unwrap();
        let rtt = round_trip as f64;
        assert!((rtt..rtt * 1.5).contains(&per_call), "{run}: {f}");
        assert!(
            f["summary"].as_str().unwrap().contains("the network took"),
            "{run}: {f}"
        );
    }
}
