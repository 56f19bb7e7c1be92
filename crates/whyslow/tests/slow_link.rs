//! A front and an API on two hosts joined by a slow link: 10 ms each way
//! (`whyslow lab link`: a delay line between two TAP devices, as netem
//! would delay the link where the kernel has it). The front's GET /page
//! calls 8 endpoints of the API one after another (apps/tiers.py, real
//! `requests` and Python's HTTP server); fixed: one call that answers them
//! all. Both hosts captured with tcpdump, the API's capture shifted
//! +41 ms. `analyze front api` must place the API's clock within the
//! bound it reports, the bound under the link's round trip + 1 ms;
//! name sequential_calls first, the calls' time split into network (at
//! least 80 %: the API answers in about a millisecond) and server, the
//! finding saying the network took it with the link's round trip; the
//! fixed front names nothing.

mod common;
use common::netns::{Netns, SlowLink};
use common::tiers::*;
use common::*;

const FRONT: &str = "10.79.1.1";
const API: &str = "10.79.1.2";
const FRONT_PORT: u16 = 8000;
const API_PORT: u16 = 8080;
/// Endpoints of the API the front's page calls.
const PARTS: &str = "8";
const API_SHIFT_US: i64 = 41_000;
/// The link's round trip: 10 ms each way.
const ROUND_TRIP_US: u64 = 20_000;
/// A bound on the API's clock offset: the link's round trip plus a
/// millisecond (the estimate is exact only where both ways are as slow).
const MAX_BOUND_US: u64 = ROUND_TRIP_US + 1_000;
/// The network's least share of the calls' time: 20 ms of round trip
/// against about a millisecond of the API's own.
const MIN_NETWORK_SHARE: f64 = 0.8;

#[test]
fn calls_across_a_slow_link_are_the_networks() {
    let _one = serial();
    let test = "calls_across_a_slow_link_are_the_networks";
    if !tiers_can_run(test, &[], &[]) {
        return;
    }
    let (front, api) = (Netns::new("sf"), Netns::new("sa"));
    let _link = SlowLink::new(
        &front,
        &format!("{FRONT}/24"),
        &api,
        &format!("{API}/24"),
        "10ms",
    );
    let port = API_PORT.to_string();
    let _api = tiers_app(&api, &["parts", API, &port], API, API_PORT);
    let dir = tmpdir(test);
    for variant in ["broken", "fixed"] {
        let front_port = FRONT_PORT.to_string();
        let args = ["page", FRONT, &front_port, API, &port, PARTS, variant];
        let app = tiers_app(&front, &args, FRONT, FRONT_PORT);
        let (front_cap, api_raw, api_cap) = (
            dir.join(format!("{variant}-front.pcap")),
            dir.join(format!("{variant}-api-raw.pcap")),
            dir.join(format!("{variant}-api.pcap")),
        );
        let url = format!("http://{FRONT}:{FRONT_PORT}/page");
        let hosts = [(&front, &*front_cap), (&api, &*api_raw)];
        captured_on(&hosts, &mut || load_in(&front, "1", "15", &url));
        drop(app);
        shifted(&api_raw, &api_cap, API_SHIFT_US);
        let report = analyzed_hosts(&[front_cap, api_cap]);
        clock_placed(variant, &report, 1, API_SHIFT_US, MAX_BOUND_US);
        let kinds = causes(&report);
        eprintln!("{variant}: {kinds:?}");
        if variant == "fixed" {
            assert!(kinds.is_empty(), "{kinds:?}");
            continue;
        }
        assert_eq!(kinds.first().map(String::as_str), Some("sequential_calls"));
        let (front_addr, api_addr) = (format!("{FRONT}:{FRONT_PORT}"), format!("{API}:{API_PORT}"));
        let (network, server) = split_of(&report, &front_addr, &api_addr);
        let share = network as f64 / (network + server) as f64;
        eprintln!("calls to the API: network {network} µs, server {server} µs");
        assert!(
            share >= MIN_NETWORK_SHARE,
            "network {network} µs, server {server} µs"
        );
        let f = finding(&report, "sequential_calls").unwrap();
        let summary = f["summary"].as_str().unwrap();
        assert!(summary.contains("the network"), "{summary}");
        let rtt = f["facts"]["network_per_call_us"].as_f64().unwrap();
        assert!(
            (ROUND_TRIP_US as f64..ROUND_TRIP_US as f64 * 1.5).contains(&rtt),
            "{f}"
        );
    }
}
