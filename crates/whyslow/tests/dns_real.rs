//! DNS on a real resolver (dnsmasq from Debian's packages) in a network
//! namespace each test makes, with real lookups through glibc (Python's
//! getaddrinfo: A and AAAA in parallel) as the namespace's resolv.conf
//! says: a Kubernetes-style search list with ndots:5, over UDP and over
//! TCP (`options use-vc`), and a resolver whose first query is dropped.
//! Every query and response is counted as tshark counts them.

mod common;
use common::netns::*;
use common::real::*;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

/// The search list of a pod in namespace `svc` (ndots:5 expands every
/// name with fewer than five dots through it first).
const SEARCH: &str = "search svc.cluster.local cluster.local\n";
/// Lookups each test makes.
const LOOKUPS: usize = 12;

/// The resolver's records: the cluster's suffixes answer NXDOMAIN, the
/// two services their address.
const RECORDS: [&str; 4] = [
    "--local=/cluster.local/",
    "--local=/internal/",
    "--address=/api.internal/127.0.0.1",
    "--address=/db.internal/127.0.0.2",
];

fn app() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/apps/dns_lookups.py")
        .to_string_lossy()
        .into_owned()
}

/// `whyslow capture` on the namespace's loopback while the lookups run;
/// the app's own JSON.
fn capture_lookups(ns: &Netns, file: &Path, names: &str, lookups: usize) -> Value {
    let out_file = file.with_extension("json");
    let script = format!(
        "{} {} {names} {lookups} > {}",
        python(),
        app(),
        out_file.display()
    );
    let out = ns
        .command(env!("CARGO_BIN_EXE_whyslow"))
        .args(["capture", "-i", "lo", "-w"])
        .arg(file)
        .args(["--", "sh", "-ec", &script])
        .output()
        .expect("whyslow capture");
    assert!(out.status.success(), "capture: {}", stderr(&out));
    serde_json::from_slice(&std::fs::read(&out_file).unwrap()).unwrap()
}

/// The UDP conversations (socket pairs) tshark finds in `file`. glibc may
/// be given a source port it used a moment before: one conversation.
fn tshark_udp_conversations(file: &Path) -> u64 {
    let out = std::process::Command::new("tshark")
        .args(["-r"])
        .arg(file)
        .args([
            "-Y",
            "udp",
            "-T",
            "fields",
            "-e",
            "ip.src",
            "-e",
            "udp.srcport",
        ])
        .args(["-e", "ip.dst", "-e", "udp.dstport"])
        .output()
        .expect("tshark");
    let pairs: BTreeSet<Vec<String>> = stdout(&out)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let mut ends = vec![f[..2].join(":"), f[2..].join(":")];
            ends.sort();
            ends
        })
        .collect();
    pairs.len() as u64
}

/// tshark's DNS messages of one kind: "TYPE name" for queries, "TYPE name
/// RCODE" for responses.
fn tshark_dns(file: &Path, responses: bool) -> Vec<String> {
    let out = std::process::Command::new("tshark")
        .args(["-r"])
        .arg(file)
        .args([
            "-Y",
            &format!("dns.flags.response=={}", u8::from(responses)),
        ])
        .args(["-T", "fields", "-e", "dns.qry.name", "-e", "dns.qry.type"])
        .args(["-e", "dns.flags.rcode"])
        .output()
        .expect("tshark");
    // A frame with several messages (TCP: A and AAAA in one segment)
    // lists each field's values comma-separated, message by message.
    let mut v = Vec::new();
    for line in stdout(&out).lines() {
        let f: Vec<Vec<&str>> = line.split('\t').map(|f| f.split(',').collect()).collect();
        for (i, name) in f[0].iter().enumerate() {
            let ty = match f[1][i] {
                "1" => "A",
                "28" => "AAAA",
                t => t,
            };
            let rcode = match f.get(2).and_then(|r| r.get(i)).copied().unwrap_or("") {
                "0" => " NOERROR",
                "3" => " NXDOMAIN",
                "2" => " SERVFAIL",
                _ => "",
            };
            v.push(match responses {
                true => format!("{ty} {name}{rcode}"),
                false => format!("{ty} {name}"),
            });
        }
    }
    v.sort();
    v
}

fn dns_exchanges(report: &Value) -> Vec<Value> {
    report["timeline"]["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["protocol"] == "dns")
        .cloned()
        .collect()
}

fn analyze(file: &Path) -> Value {
    let out = whyslow(&["analyze", "--json", "--timeline", file.to_str().unwrap()]);
    assert!(out.status.success(), "analyze: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn needs(test: &str) -> bool {
    requirements_met(
        test,
        &[
            Need::Tool("dnsmasq"),
            Need::Tool("tshark"),
            Need::Tool("nft"),
            Need::Capture,
        ],
    ) && netns_allowed(test)
}

#[test]
fn real_resolver_every_query_and_answer_as_tshark_counts_them() {
    let _one = serial();
    let test = "dns_counts";
    if !needs(test) {
        return;
    }
    for (transport, option) in [("udp", ""), ("tcp", " use-vc")] {
        let ns = Netns::new(&format!("dns{transport}"));
        ns.resolv_conf(&format!(
            "nameserver 127.0.0.1\n{SEARCH}options ndots:5{option}\n"
        ));
        let _resolver = Dnsmasq::start(&ns, &RECORDS);
        let dir = tmpdir(&format!("{test}-{transport}"));
        let file = dir.join("dns.pcapng");
        let sent = capture_lookups(&ns, &file, "api.internal,db.internal", LOOKUPS);
        assert_eq!(sent["failed"], 0, "{transport}: {sent}");
        let report = analyze(&file);
        let ex = dns_exchanges(&report);
        let mut queries: Vec<String> = ex
            .iter()
            .map(|e| e["request"].as_str().unwrap().to_string())
            .collect();
        queries.sort();
        let mut answers: Vec<String> = ex
            .iter()
            .filter(|e| e["response_first_at_us"].is_u64())
            .map(|e| {
                format!(
                    "{} {}",
                    e["request"].as_str().unwrap(),
                    e["status"]["dns"].as_str().unwrap()
                )
            })
            .collect();
        answers.sort();
        let (tq, ta) = (tshark_dns(&file, false), tshark_dns(&file, true));
        // Each lookup: two NXDOMAIN suffixes, then the name, A and AAAA each.
        assert_eq!(tq.len(), LOOKUPS * 6, "{transport}: tshark saw {tq:?}");
        assert_eq!(queries, tq, "{transport}: queries");
        assert_eq!(answers, ta, "{transport}: answers");
        let nx = answers.iter().filter(|a| a.ends_with("NXDOMAIN")).count();
        assert!(nx >= LOOKUPS * 4, "{transport}: {nx} NXDOMAIN");
        let summary = &report["capture"];
        let flows = summary["udp_flows"].as_u64().unwrap_or(0);
        match transport {
            "udp" => assert_eq!(flows, tshark_udp_conversations(&file), "{summary}"),
            _ => assert_eq!(flows, 0, "{summary}"),
        }
        let text = stdout(&whyslow(&["analyze", file.to_str().unwrap()]));
        assert!(
            text.contains("dns :53 A api.internal.svc.cluster.local"),
            "{text}"
        );
        // Every lookup walked the two suffixes: named per name, with the
        // count the resolver's configuration makes.
        for name in ["api.internal", "db.internal"] {
            let f = finding(&report, "dns_search_expansion", name)
                .unwrap_or_else(|| panic!("{transport}: no search expansion for {name}: {text}"));
            assert_eq!(f["occurrences"], LOOKUPS as u64 / 2, "{transport}: {f}");
            // Two suffixes, A and AAAA each.
            assert_eq!(
                f["facts"]["wasted_queries_per_lookup"], 4.0,
                "{transport}: {f}"
            );
        }
    }
}

/// The finding of `kind` whose subject ends with `name`.
fn finding<'a>(report: &'a Value, kind: &str, name: &str) -> Option<&'a Value> {
    report["findings"]
        .as_array()?
        .iter()
        .find(|f| f["kind"] == kind && f["subject"].as_str().is_some_and(|s| s.ends_with(name)))
}

#[test]
fn a_dropped_query_is_the_stall_of_the_resolvers_timeout() {
    let _one = serial();
    let test = "dns_timeout";
    if !needs(test) {
        return;
    }
    // A name with its trailing dot skips the search list; glibc waits
    // `timeout:` seconds for the dropped query, then asks again.
    const TIMEOUT_S: u64 = 1;
    let ns = Netns::new("dnsdrop");
    ns.resolv_conf(&format!(
        "nameserver 127.0.0.1\n{SEARCH}options ndots:5 timeout:{TIMEOUT_S} attempts:2\n"
    ));
    let _resolver = Dnsmasq::start(&ns, &RECORDS);
    // The first query to the resolver is lost, every later one goes through.
    ns.nft(
        "table inet whyslow_drop {\n chain input {\n  type filter hook input priority 0;\n  \
         udp dport 53 numgen inc mod 1000000 == 0 drop\n }\n}\n",
    );
    let dir = tmpdir(test);
    let file = dir.join("dns.pcapng");
    let sent = capture_lookups(&ns, &file, "api.internal.", 3);
    assert_eq!(sent["failed"], 0, "{sent}");
    let first_ms = sent["ms"][0].as_f64().unwrap();
    assert!(first_ms >= TIMEOUT_S as f64 * 1000.0, "{sent}");
    let report = analyze(&file);
    let f = report["findings"][0].clone();
    assert_eq!(f["kind"], "dns_timeout", "{report:#}");
    assert_eq!(f["occurrences"], 1, "{f}");
    let stall = f["time_lost_per_occurrence_us"].as_u64().unwrap();
    // The app waited its own timeout: the wire's stall is within its
    // lookup, and the timeout give or take its timer (glibc starts the
    // clock before it sends: the retry leaves up to ~0.1 ms early).
    let configured = TIMEOUT_S * 1_000_000;
    let near = (stall as f64 - configured as f64).abs() <= 0.05 * configured as f64;
    assert!(
        near && (stall as f64) <= first_ms * 1000.0,
        "stall {stall} µs, timeout {configured} µs, lookup {first_ms} ms"
    );
    let summary = f["summary"].as_str().unwrap();
    let ex = dns_exchanges(&report);
    let lost: Vec<&Value> = ex
        .iter()
        .filter(|e| e["response_first_at_us"].is_null())
        .collect();
    assert_eq!(lost.len(), 1, "{ex:?}");
    let question = format!("{} ×1", lost[0]["request"].as_str().unwrap());
    assert!(summary.contains(&question), "{summary}");
}

/// Backing calls per request the DNS service makes, each after a lookup.
const SERVICE_CALLS: u64 = 3;
/// Ports inside the namespace: nothing else listens there.
const APP_PORT: u16 = 8080;
const API_PORT: u16 = 8081;
/// The upstream resolver's port in the namespace, and its answer time.
const UPSTREAM_PORT: u16 = 5300;
const UPSTREAM_MS: u64 = 2;
/// The share of the app's own lookup time a finding's cost may differ by
/// (the lab's tolerance).
const COST_TOLERANCE: f64 = 0.25;

fn apps_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps")
}

/// A pod's resolver in `ns` (its search list, ndots:5): dnsmasq forwarding
/// every name (caching nothing) to an upstream a region away, each answer
/// taking UPSTREAM_MS, as a service's lookups would from a resolver that
/// goes upstream each time. Both stop when dropped.
fn pod_resolver(ns: &Netns) -> (NsServer, Dnsmasq) {
    ns.resolv_conf(&format!("nameserver 127.0.0.1\n{SEARCH}options ndots:5\n"));
    let upstream = NsServer::start_udp(
        ns,
        ns.command(python())
            .arg(apps_dir().join("dns_upstream.py"))
            .args([UPSTREAM_PORT.to_string(), UPSTREAM_MS.to_string()])
            .args(["api.internal=127.0.0.1", "ready.check=127.0.0.1"]),
    );
    let forward = format!("--server=127.0.0.1#{UPSTREAM_PORT}");
    (upstream, Dnsmasq::start(ns, &[forward.as_str()]))
}

/// The DNS service (`variant`) and its API in `ns`, the service writing
/// each request's lookup time (µs) to `truth`.
fn dns_service(ns: &Netns, variant: &str, truth: &Path) -> (NsServer, NsServer) {
    let api = NsServer::start(
        ns,
        ns.command(python())
            .arg(apps_dir().join("dns_api.py"))
            .arg(API_PORT.to_string()),
        API_PORT,
    );
    let app = NsServer::start(
        ns,
        ns.command(python())
            .arg(apps_dir().join("dns_app.py"))
            .args([APP_PORT, API_PORT].map(|p| p.to_string()))
            .args([SERVICE_CALLS.to_string(), variant.to_string()])
            .env("WHYSLOW_DNS_TRUTH", truth),
        APP_PORT,
    );
    (api, app)
}

/// The lookup time per request the app measured: (median, mean), µs.
fn app_lookup_us(truth: &Path) -> (f64, f64) {
    let mut v: Vec<f64> = std::fs::read_to_string(truth)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(!v.is_empty(), "the app recorded no request");
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    (v[v.len() / 2], mean)
}

fn dns_kinds(report: &Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["kind"].as_str())
        .filter(|k| k.starts_with("dns_") || *k == "slow_resolver")
        .map(String::from)
        .collect()
}

#[test]
fn a_service_resolving_before_every_call_is_named_alone_and_at_8_clients() {
    let _one = serial();
    let test = "dns_service";
    if !needs(test) || !requirements_met(test, &[Need::Tool("tcpdump")]) {
        return;
    }
    let ns = Netns::new("dnssvc");
    let _resolver = pod_resolver(&ns);
    let dir = tmpdir(test);
    let url = format!("http://127.0.0.1:{APP_PORT}/quote");
    for variant in ["broken", "fixed"] {
        // One request at a time, through diagnose.
        let truth = dir.join(format!("{variant}-alone.txt"));
        let servers = dns_service(&ns, variant, &truth);
        let out = ns
            .command(env!("CARGO_BIN_EXE_whyslow"))
            .args([
                "diagnose",
                "--json",
                "-n",
                "10",
                "-p",
                &API_PORT.to_string(),
                &url,
            ])
            .output()
            .expect("diagnose");
        assert!(out.status.success(), "diagnose: {}", stderr(&out));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        drop(servers);
        let kinds = dns_kinds(&report);
        if variant == "fixed" {
            assert!(kinds.is_empty(), "fixed, alone: {kinds:?}");
        } else {
            let top = &report["findings"][0];
            assert_eq!(top["kind"], "dns_per_call", "{:#}", report["findings"]);
            // glibc: three names (two suffixes), A and AAAA each, per lookup.
            assert_eq!(
                top["facts"]["lookups_per_request"], SERVICE_CALLS as f64,
                "{top}"
            );
            assert_eq!(
                top["facts"]["queries_per_request"],
                6.0 * SERVICE_CALLS as f64,
                "{top}"
            );
            let (median, _) = app_lookup_us(&truth);
            let lost = top["time_lost_per_occurrence_us"].as_f64().unwrap();
            assert!(
                (lost - median).abs() <= COST_TOLERANCE * median,
                "alone: {lost} µs on the wire, {median} µs as the app timed it"
            );
            assert!(
                kinds.contains(&"dns_search_expansion".to_string()),
                "{kinds:?}"
            );
        }
        // Eight clients at once, tcpdump's capture analyzed.
        let truth = dir.join(format!("{variant}-8.txt"));
        let servers = dns_service(&ns, variant, &truth);
        let file = dir.join(format!("{variant}-8.pcap"));
        let filter = format!("tcp port {APP_PORT} or tcp port {API_PORT} or udp port 53");
        let dropped = tcpdump_in(ns.command("tcpdump"), &file, &filter, || {
            let out = ns
                .command(env!("CARGO_BIN_EXE_whyslow"))
                .args(["load", "-c", "8", "-n", "80", &url])
                .output()
                .expect("load");
            assert!(out.status.success(), "load: {}", stderr(&out));
        });
        drop(servers);
        assert_eq!(dropped, 0, "tcpdump dropped packets");
        let out = whyslow(
            &["analyze", "--json", "--service", &APP_PORT.to_string()]
                .into_iter()
                .chain([file.to_str().unwrap()])
                .collect::<Vec<_>>(),
        );
        assert!(out.status.success(), "analyze: {}", stderr(&out));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let kinds = dns_kinds(&report);
        if variant == "fixed" {
            assert!(kinds.is_empty(), "fixed, 8 clients: {kinds:?}");
            continue;
        }
        let top = &report["findings"][0];
        assert_eq!(top["kind"], "dns_per_call", "{:#}", report["findings"]);
        let lookups = top["facts"]["lookups_per_request"].as_f64().unwrap();
        assert!((lookups - SERVICE_CALLS as f64).abs() < 0.05, "{top}");
        let (_, mean) = app_lookup_us(&truth);
        let lost = top["time_lost_per_occurrence_us"].as_f64().unwrap();
        assert!(
            (lost - mean).abs() <= COST_TOLERANCE * mean,
            "8 clients: {lost} µs on the wire, {mean} µs as the app timed it (mean)"
        );
    }
}

/// `whyslow capture` on the namespace's loopback while Node resolves
/// `name` `lookups` times `how` ("lookup": getaddrinfo; "resolve": c-ares).
fn capture_node(ns: &Netns, file: &Path, how: &str, name: &str, lookups: usize) -> Value {
    let app = apps_dir().join("dns_lookups.js");
    let out = ns
        .command(env!("CARGO_BIN_EXE_whyslow"))
        .args(["capture", "-i", "lo", "-w"])
        .arg(file)
        .args(["--", "node"])
        .arg(app)
        .args([how, name, &lookups.to_string()])
        .output()
        .expect("whyslow capture");
    assert!(out.status.success(), "capture: {}", stderr(&out));
    let line = stdout(&out)
        .lines()
        .find(|l| l.starts_with('{'))
        .map(String::from);
    serde_json::from_str(&line.unwrap_or_else(|| panic!("node said: {}", stdout(&out)))).unwrap()
}

#[test]
fn node_resolves_through_glibc_and_through_c_ares_as_tshark_counts() {
    let _one = serial();
    let test = "dns_node";
    if !needs(test) || !requirements_met(test, &[Need::Tool("node")]) {
        return;
    }
    let ns = Netns::new("dnsnode");
    ns.resolv_conf(&format!("nameserver 127.0.0.1\n{SEARCH}options ndots:5\n"));
    let _resolver = Dnsmasq::start(&ns, &RECORDS);
    let dir = tmpdir(test);
    // dns.lookup walks the search list as glibc does; c-ares's resolve4
    // (Node's ares_query) asks the name as it is.
    for (how, walks) in [("lookup", true), ("resolve", false)] {
        let file = dir.join(format!("{how}.pcapng"));
        let sent = capture_node(&ns, &file, how, "api.internal", LOOKUPS);
        assert_eq!(sent["failed"], 0, "{how}: {sent}");
        let report = analyze(&file);
        let mut queries: Vec<String> = dns_exchanges(&report)
            .iter()
            .map(|e| e["request"].as_str().unwrap().to_string())
            .collect();
        queries.sort();
        assert_eq!(queries, tshark_dns(&file, false), "{how}: queries");
        assert!(queries.len() >= LOOKUPS, "{how}: {queries:?}");
        let expansion = finding(&report, "dns_search_expansion", "api.internal");
        assert_eq!(
            expansion.is_some(),
            walks,
            "{how}: {:#}",
            report["findings"]
        );
        if let Some(f) = expansion {
            assert_eq!(f["occurrences"], LOOKUPS as u64, "{how}: {f}");
        }
    }
}

#[test]
fn a_resolver_that_goes_upstream_for_every_answer_is_slow() {
    let _one = serial();
    let test = "dns_slow";
    if !needs(test) {
        return;
    }
    // Every answer from an upstream a region away: 15 ms, nothing cached.
    const FAR_MS: u64 = 15;
    let ns = Netns::new("dnsslow");
    ns.resolv_conf("nameserver 127.0.0.1\noptions ndots:1\n");
    let _upstream = NsServer::start_udp(
        &ns,
        ns.command(python())
            .arg(apps_dir().join("dns_upstream.py"))
            .args([UPSTREAM_PORT.to_string(), FAR_MS.to_string()])
            .args(["api.internal=127.0.0.1", "ready.check=127.0.0.1"]),
    );
    let forward = format!("--server=127.0.0.1#{UPSTREAM_PORT}");
    let _resolver = Dnsmasq::start(&ns, &[forward.as_str()]);
    let dir = tmpdir(test);
    let file = dir.join("slow.pcapng");
    let sent = capture_lookups(&ns, &file, "api.internal", LOOKUPS);
    assert_eq!(sent["failed"], 0, "{sent}");
    let report = analyze(&file);
    let f = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "slow_resolver")
        .unwrap_or_else(|| panic!("{:#}", report["findings"]));
    let median = f["facts"]["median_answer_us"].as_f64().unwrap();
    let far = (FAR_MS * 1000) as f64;
    assert!(
        (median - far).abs() <= COST_TOLERANCE * far,
        "answers took {median} µs, the upstream {far} µs"
    );
    // Names asked as they are (ndots:1): no search walk.
    assert!(finding(&report, "dns_search_expansion", "api.internal").is_none());
}

/// `probe` of a URL by name in a pod-like namespace (search list, ndots:5,
/// `timeout:1`): its dns phase split into the search names that failed
/// and the one that answered, each as tshark reads the walk's own queries
/// in a capture of the run; the walk's first query dropped by nftables
/// (the 7th query to the resolver: glibc's lookup sends six) shows as a
/// retry costing the configured timeout.
#[test]
fn probe_says_what_its_dns_phase_was_spent_on() {
    let _one = serial();
    let test = "dns_probe";
    if !needs(test) {
        return;
    }
    const TIMEOUT_S: u64 = 1;
    let ns = Netns::new("dnsprobe");
    ns.resolv_conf(&format!(
        "nameserver 127.0.0.1\n{SEARCH}options ndots:5 timeout:{TIMEOUT_S} attempts:2\n"
    ));
    let _resolver = Dnsmasq::start(&ns, &RECORDS);
    let _api = NsServer::start(
        &ns,
        ns.command(python())
            .arg(apps_dir().join("dns_api.py"))
            .arg(API_PORT.to_string()),
        API_PORT,
    );
    ns.nft(
        "table inet whyslow_drop {\n chain input {\n  type filter hook input priority 0;\n  \
         udp dport 53 numgen inc mod 1000000 == 6 drop\n }\n}\n",
    );
    let dir = tmpdir(test);
    let file = dir.join("probe.pcapng");
    let json_file = dir.join("probe.json");
    let url = format!("http://api.internal:{API_PORT}/price/1");
    let script = format!(
        "{} probe --json -n 1 {url} > {}",
        env!("CARGO_BIN_EXE_whyslow"),
        json_file.display()
    );
    let out = ns
        .command(env!("CARGO_BIN_EXE_whyslow"))
        .args(["capture", "-i", "lo", "-w"])
        .arg(&file)
        .args(["--", "sh", "-ec", &script])
        .output()
        .expect("whyslow capture");
    assert!(out.status.success(), "capture: {}", stderr(&out));
    let report: Value = serde_json::from_slice(&std::fs::read(&json_file).unwrap()).unwrap();
    let walk = &report["sections"][0]["dns"];
    let steps = walk["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("{report:#}"));
    let named: Vec<(&str, &str)> = steps
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["answer"].as_str().unwrap()))
        .collect();
    // As tshark reads the capture: each name's A answered twice with the
    // walk's rcode (glibc's lookup, then the walk), and asked once more
    // than the walk tried it (glibc's query).
    let (queries, answers) = (tshark_dns(&file, false), tshark_dns(&file, true));
    let count = |list: &[String], item: String| list.iter().filter(|x| **x == item).count();
    for s in steps {
        let (name, answer) = (s["name"].as_str().unwrap(), s["answer"].as_str().unwrap());
        let tries = s["tries"].as_u64().unwrap() as usize;
        assert_eq!(
            count(&answers, format!("A {name} {answer}")),
            2,
            "{answers:?}"
        );
        assert_eq!(
            count(&queries, format!("A {name}")),
            1 + tries,
            "{queries:?}"
        );
    }
    assert_eq!(
        named,
        [
            ("api.internal.svc.cluster.local", "NXDOMAIN"),
            ("api.internal.cluster.local", "NXDOMAIN"),
            ("api.internal", "NOERROR"),
        ]
    );
    assert_eq!(walk["search_names"], 2, "{walk}");
    let first = &steps[0];
    assert_eq!(first["tries"], 2, "{walk}");
    let retry = first["retry_us"].as_f64().unwrap();
    let configured = TIMEOUT_S as f64 * 1e6;
    assert!(
        (retry - configured).abs() <= 0.05 * configured,
        "a lost query costs the timeout: {walk}"
    );
    assert_eq!(walk["retry_us"], first["retry_us"], "{walk}");
    // The search list cost this lookup the lost try's timeout.
    let search = walk["search_us"].as_f64().unwrap();
    assert!(search >= 0.95 * configured, "{walk}");
    // The text says so.
    let text = stdout(
        &ns.command(env!("CARGO_BIN_EXE_whyslow"))
            .args(["probe", "-n", "1", &url])
            .output()
            .unwrap(),
    );
    assert!(
        text.contains("search list: 2 name(s) tried first") && text.contains("\"api.internal.\""),
        "{text}"
    );
}

/// Under eBPF the service's lookups (glibc's connected UDP sockets, A and
/// AAAA sent in one sendmmsg) carry the thread that sent them: at 8
/// clients, where the wire alone leaves lookups of requests in flight
/// together ambiguous, every query goes by thread to a request, each
/// request exactly the queries its lookups send (three names, A and AAAA,
/// per call), and dns_per_call is named.
#[test]
fn under_ebpf_a_services_lookups_go_to_their_requests_by_thread() {
    let _one = serial();
    let test = "dns_ebpf";
    if !needs(test) || !requirements_met(test, &[Need::Ebpf]) {
        return;
    }
    let ns = Netns::new("dnsebpf");
    let _resolver = pod_resolver(&ns);
    let dir = tmpdir(test);
    let (_api, app) = dns_service(&ns, "broken", &dir.join("truth.txt"));
    let cap = dir.join("ebpf.pcapng");
    let url = format!("http://127.0.0.1:{APP_PORT}/quote");
    const REQUESTS: usize = 48;
    let out = ns
        .command(env!("CARGO_BIN_EXE_whyslow"))
        .args(["capture", "--ebpf", "--pid", &app.pid().to_string()])
        .args(["-p", &APP_PORT.to_string(), "-p", &API_PORT.to_string()])
        .arg("-w")
        .arg(&cap)
        .args(["--", env!("CARGO_BIN_EXE_whyslow"), "load", "-c", "8"])
        .args(["-n", &REQUESTS.to_string(), &url])
        .output()
        .expect("whyslow capture");
    assert!(out.status.success(), "capture: {}", stderr(&out));
    assert!(stderr(&out).contains(" 0 lost"), "{}", stderr(&out));
    drop(app);
    let report = analyzed_timeline(&cap, &APP_PORT.to_string());
    let ex = dns_exchanges(&report);
    let per_request = 6 * SERVICE_CALLS as usize;
    assert_eq!(ex.len(), REQUESTS * per_request, "queries captured");
    let by_thread: Vec<&Value> = ex.iter().filter(|e| e["rule"] == "thread").collect();
    assert_eq!(by_thread.len(), ex.len(), "every query by thread");
    let mut counts: std::collections::HashMap<u64, usize> = Default::default();
    for e in &by_thread {
        *counts.entry(e["parent"].as_u64().unwrap()).or_default() += 1;
    }
    assert_eq!(counts.len(), REQUESTS, "{counts:?}");
    assert!(counts.values().all(|&n| n == per_request), "{counts:?}");
    // Named; its cost per request is held to the app's own timing one
    // request at a time (above): eight Python threads under one interpreter
    // lock time their own lookups late.
    assert!(
        finding(&report, "dns_per_call", "").is_some(),
        "{:#}",
        report["findings"]
    );
}
