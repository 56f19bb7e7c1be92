//! Three hosts, one answer: a front, an API and a database in three
//! network namespaces joined by veth pairs (front — API — database), real
//! software on each (apps/tiers.py: Python's HTTP server, requests,
//! redis-py; Redis from Debian's package), tcpdump on each host. The API's
//! capture is shifted +41 ms and the database's −7.5 ms, as `editcap -t`
//! shifts a capture (clocks that disagree). `analyze front api db` must
//! place both clocks within the bound it reports (under a millisecond:
//! veth's round trip is tens of µs), join the hosts' connections, and
//! name the API's N+1 on the database for the front's request kind with
//! its count, sequentially and at 8 clients: no call given to the wrong front
//! request (none holds more than its 20 different GETs and its one API
//! call), every call given sequentially; the fixed API (one MGET) names
//! nothing. Unrelated hosts, one file twice and a clock
//! that steps mid-capture are said so, and nothing is joined wrongly.

mod common;
use common::netns::{link, Netns, NsServer};
use common::real::*;
use common::tiers::*;
use common::*;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

const FRONT: &str = "10.77.1.1";
const API: &str = "10.77.1.2";
const API_DB_SIDE: &str = "10.77.2.1";
const DB: &str = "10.77.2.2";
const FRONT_PORT: u16 = 8000;
const API_PORT: u16 = 8080;
const REDIS_PORT: u16 = 6379;
const PG_PORT: u16 = 5432;
/// Keys the API reads per request (its N+1).
const ITEMS: u64 = 20;
/// The shifts editcap gives the API's and the database's captures (µs).
const API_SHIFT_US: i64 = 41_000;
const DB_SHIFT_US: i64 = -7_500;
/// A bound on each offset: the hop's minimum round trip (tens of µs on
/// veth) plus a millisecond.
const MAX_BOUND_US: u64 = 1_000;

/// Whether `test` can run here: the tiers, Redis, redis-py and `more`.
fn can_run(test: &str, more: &[Need<'static>]) -> bool {
    let mut needs = vec![Need::Tool("redis-server")];
    needs.extend_from_slice(more);
    tiers_can_run(test, &["redis"], &needs)
}

/// The database tier: Redis (read with GET, an N+1 of keys) or
/// PostgreSQL (read with SELECT, an N+1 of statements).
#[derive(Clone, Copy, PartialEq)]
enum Db {
    Redis,
    Postgres,
}

impl Db {
    fn port(self) -> u16 {
        match self {
            Db::Redis => REDIS_PORT,
            Db::Postgres => PG_PORT,
        }
    }

    /// How the API's per-item read is named.
    fn per_item(self) -> &'static str {
        match self {
            Db::Redis => "GET item:?",
            Db::Postgres => "SELECT value FROM items WHERE id = ",
        }
    }

    /// The server, in `ns` on DB, until dropped.
    fn start(self, ns: &Netns) -> NsServer {
        let port = self.port().to_string();
        let mut cmd = match self {
            Db::Redis => {
                let mut redis = ns.command("redis-server");
                redis.args(["--bind", DB, "--port", &port, "--save", ""]);
                // Its clients come from another host, not loopback.
                redis.args(["--appendonly", "no", "--protected-mode", "no"]);
                redis
            }
            Db::Postgres => {
                let dir = tmpdir("pg-tier");
                pg_cluster(&dir);
                let as_postgres = |program: &Path| {
                    let mut c = ns.command("runuser");
                    c.args(["-u", "postgres", "--"]).arg(program);
                    c
                };
                let mut pg = pg_server(as_postgres, &dir, DB, PG_PORT);
                // Its clients come from another host: trust them too.
                let hba = dir.join("data/pg_hba.conf");
                let mut rules = std::fs::read_to_string(&hba).unwrap();
                rules.push_str("host all all 10.77.0.0/16 trust\n");
                std::fs::write(&hba, rules).unwrap();
                pg.args(["-c", "max_connections=200"]);
                pg
            }
        };
        NsServer::start_on(ns, &mut cmd, DB, self.port())
    }
}

struct Tiers {
    front: Netns,
    api: Netns,
    db: Netns,
    kind: Db,
    _db: NsServer,
}

impl Tiers {
    fn new(kind: Db) -> Tiers {
        let (front, api, db) = (Netns::new("tf"), Netns::new("ta"), Netns::new("td"));
        link(&front, &format!("{FRONT}/24"), &api, &format!("{API}/24"));
        link(&api, &format!("{API_DB_SIDE}/24"), &db, &format!("{DB}/24"));
        let server = kind.start(&db);
        Tiers {
            front,
            api,
            db,
            kind,
            _db: server,
        }
    }

    /// The front and the API (`variant`), serving until dropped.
    fn apps(&self, variant: &str) -> (NsServer, NsServer) {
        let (api_port, db_port, items) = (
            API_PORT.to_string(),
            self.kind.port().to_string(),
            ITEMS.to_string(),
        );
        let db = match self.kind {
            Db::Redis => "redis",
            Db::Postgres => "postgres",
        };
        let api_args = ["api", API, &api_port, DB, &db_port, &items, variant, db];
        let api = tiers_app(&self.api, &api_args, API, API_PORT);
        let front_args = ["front", FRONT, &FRONT_PORT.to_string(), API, &api_port];
        let front = tiers_app(&self.front, &front_args, FRONT, FRONT_PORT);
        (front, api)
    }

    /// `requests` pages from `clients` clients in the front's namespace,
    /// captured on each host: (front, api, db) captures, the API's and the
    /// database's shifted as editcap shifts them.
    fn captured(&self, dir: &Path, clients: &str, requests: &str) -> [PathBuf; 3] {
        let raw = ["front", "api-raw", "db-raw"].map(|n| dir.join(format!("{n}.pcap")));
        let url = format!("http://{FRONT}:{FRONT_PORT}/report");
        let hosts = [
            (&self.front, &*raw[0]),
            (&self.api, &raw[1]),
            (&self.db, &raw[2]),
        ];
        captured_on(&hosts, &mut || {
            load_in(&self.front, clients, requests, &url)
        });
        let [front, api, db] = raw;
        let (api_shifted, db_shifted) = (dir.join("api.pcap"), dir.join("db.pcap"));
        shifted(&api, &api_shifted, API_SHIFT_US);
        shifted(&db, &db_shifted, DB_SHIFT_US);
        [front, api_shifted, db_shifted]
    }
}

/// The causes named, less a retransmission or a zero window tshark reads
/// in the capture of the host whose copy of the connection was read (each
/// evidence's connection says which host's, and its packet numbers are
/// that file's).
fn causes_less_real_tcp_on(report: &Value, files: &[PathBuf; 3]) -> Vec<String> {
    let host_of: HashMap<u64, usize> = report["timeline"]["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_u64().unwrap(),
                c["host"].as_u64().unwrap_or(0) as usize,
            )
        })
        .collect();
    causes(report)
        .into_iter()
        .filter(|kind| {
            let f = finding(report, kind).unwrap();
            match kind.as_str() {
                "tcp_retransmission" => !(0..3).all(|h| {
                    let mut mine = f.clone();
                    let evidence = f["evidence"].as_array().unwrap().iter().filter(|e| {
                        e["connection"].as_u64().and_then(|c| host_of.get(&c)) == Some(&h)
                    });
                    mine["evidence"] = Value::Array(evidence.cloned().collect());
                    mine["evidence"].as_array().unwrap().is_empty()
                        || retransmission_on_the_wire(&mine, &files[h]).is_ok()
                }),
                "zero_window" => {
                    let seen: u64 = files
                        .iter()
                        .map(|f| tshark_zero_windows(f).unwrap_or(0))
                        .sum();
                    seen < f["occurrences"].as_u64().unwrap_or(0).max(1)
                }
                _ => true,
            }
        })
        .collect()
}

/// Each host's clock recovered within the bound it reports.
fn clocks_placed(run: &str, report: &Value) {
    let hosts = report["capture"]["hosts"].as_array().unwrap();
    let names: Vec<&str> = hosts.iter().map(|h| h["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["front", "api", "db"], "{run}");
    clock_placed(run, report, 1, API_SHIFT_US, MAX_BOUND_US);
    clock_placed(run, report, 2, DB_SHIFT_US, MAX_BOUND_US);
}

/// No call given to the wrong front request: none holds more than its
/// ITEMS GETs (all different) and its one API call. `all`: sequentially,
/// every call is given. Returns the front requests given exactly theirs.
fn calls_placed(run: &str, report: &Value, db: Db, all: bool) -> usize {
    let t = &report["timeline"];
    let port: HashMap<u64, String> = t["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_u64().unwrap(),
                c["server"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut per_request: HashMap<u64, (BTreeSet<String>, u64, u64)> = HashMap::new();
    let mut front_requests = 0;
    for e in t["exchanges"].as_array().unwrap() {
        let server = &port[&e["connection"].as_u64().unwrap()];
        if e["role"] == "inbound" {
            front_requests += 1;
            continue;
        }
        let is_get = e["request"]
            .as_str()
            .is_some_and(|r| r.starts_with(db.per_item()));
        let is_api = server.ends_with(&format!(":{API_PORT}"));
        if !is_get && !is_api {
            continue; // the client's handshake (HELLO, CLIENT SETINFO)
        }
        let Some(parent) = e["parent"].as_u64() else {
            assert!(!all, "{run}: a call given to no request: {e}");
            continue;
        };
        let entry = per_request.entry(parent).or_default();
        if is_get {
            entry
                .0
                .insert(e["params_digest"].as_str().unwrap().to_string());
            entry.1 += 1;
        } else {
            entry.2 += 1;
        }
    }
    if all {
        assert_eq!(per_request.len(), front_requests, "{run}");
    }
    let mut exact = 0;
    for (request, (keys, gets, api_calls)) in per_request {
        assert!(
            gets <= ITEMS && keys.len() as u64 == gets && api_calls <= 1,
            "{run}: {request}"
        );
        exact += usize::from(gets == ITEMS && api_calls == 1);
    }
    if all {
        assert_eq!(exact, front_requests, "{run}");
    }
    eprintln!("{run}: {exact} of {front_requests} front requests given exactly their calls");
    exact
}

/// Runs `tool` with `args`, which must succeed.
fn run_tool(tool: &str, args: &[&str]) {
    let out = Command::new(tool).args(args).output().unwrap();
    assert!(out.status.success(), "{tool} {args:?}: {out:?}");
}

/// What a capture of unrelated hosts, the same file twice, and a host whose
/// clock stepped mid-capture give: a clear statement, nothing joined that
/// should not be.
fn bad_input(dir: &Path, [front, api, db]: &[PathBuf; 3]) {
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    // The front and the database share no connection.
    let out = whyslow(&["analyze", "--json", &s(front), &s(db)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = json(&out);
    let hosts = &report["capture"]["hosts"];
    assert!(hosts[1]["clock_offset_us"].is_null(), "{hosts}");
    let errors = report["errors"].to_string();
    assert!(errors.contains("shares no connection"), "{errors}");
    let conns = report["capture"]["servers"].to_string();
    assert!(
        !conns.contains(&format!(":{REDIS_PORT}")),
        "the database left out: {conns}"
    );
    // A host's capture cut mid-packet: what was read is joined, and the
    // cut is said with the file's name.
    let cut = dir.join("api-cut.pcap");
    let bytes = std::fs::read(api).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2 + 7]).unwrap();
    let out = whyslow(&["analyze", "--json", &s(front), &s(&cut)]);
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    let report = json(&out);
    let said = report["errors"].to_string();
    assert!(said.contains("api-cut.pcap"), "{said}");
    assert!(
        report["capture"]["hosts"][1]["clock_offset_us"].is_i64(),
        "{}",
        report["capture"]["hosts"]
    );
    assert!(report["capture"]["exchanges"].as_u64() > Some(0));
    // One file twice.
    let out = whyslow(&["analyze", &s(front), &s(front)]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("given twice"), "{}", stderr(&out));
    // The API's clock steps 5 ms forward halfway through its capture.
    let packets = Command::new("capinfos")
        .args(["-c", "-M", "-T"])
        .arg(api)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&packets.stdout);
    let n: u64 = text
        .lines()
        .next_back()
        .unwrap()
        .split('\t')
        .next_back()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let half = n / 2;
    let [a, b, b5, stepped] = ["a1", "a2", "a2s", "stepped"].map(|x| dir.join(format!("{x}.pcap")));
    run_tool("editcap", &["-r", &s(api), &s(&a), &format!("1-{half}")]);
    run_tool(
        "editcap",
        &["-r", &s(api), &s(&b), &format!("{}-{n}", half + 1)],
    );
    run_tool("editcap", &["-t", "0.005", &s(&b), &s(&b5)]);
    run_tool(
        "mergecap",
        &["-a", "-F", "pcap", "-w", &s(&stepped), &s(&a), &s(&b5)],
    );
    let out = whyslow(&["analyze", "--json", &s(front), &s(&stepped)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = json(&out);
    let api_host = &report["capture"]["hosts"][1];
    assert_eq!(api_host["clock_disagrees"], true, "{api_host}");
    if let Some(bound) = api_host["clock_offset_bound_us"].as_u64() {
        assert!(bound >= 2_500, "a bound that covers the step: {api_host}");
    }
}

#[test]
fn three_hosts_one_answer() {
    let _one = serial();
    let test = "three_hosts_one_answer";
    if can_run(test, &[]) {
        three_tiers(test, Db::Redis);
    }
}

/// The same three tiers with PostgreSQL as the database (psycopg2 in the
/// API, one statement a round trip): its N+1 of SELECTs named for the
/// front's request kind with its count.
#[test]
fn three_hosts_on_postgres() {
    let _one = serial();
    let test = "three_hosts_on_postgres";
    let more = [Need::Postgres, Need::Tool("runuser")];
    if tiers_can_run(test, &["psycopg2"], &more) {
        three_tiers(test, Db::Postgres);
    }
}

/// The three tiers on `db`, broken and fixed, sequentially and at 8
/// clients (see the module comment).
fn three_tiers(test: &str, db: Db) {
    let tiers = Tiers::new(db);
    let dir = tmpdir(test);
    for variant in ["broken", "fixed"] {
        let apps = tiers.apps(variant);
        for (clients, requests) in [("1", "30"), ("8", "160")] {
            let run = format!("{variant} at {clients} client(s)");
            let runs = dir.join(format!("{variant}-{clients}"));
            std::fs::create_dir_all(&runs).unwrap();
            let files = tiers.captured(&runs, clients, requests);
            let report = analyzed_hosts(&files);
            clocks_placed(&run, &report);
            // The API's 20 reads (or one) are its own time: on veth, with a
            // round trip of tens of µs, the server's part is most of the call.
            let (front, api) = (format!("{FRONT}:{FRONT_PORT}"), format!("{API}:{API_PORT}"));
            let (network, server) = split_of(&report, &front, &api);
            eprintln!("{run}: calls to the API: network {network} µs, server {server} µs");
            assert!(
                server > network,
                "{run}: network {network} µs, server {server} µs"
            );
            let kinds = causes_less_real_tcp_on(&report, &files);
            eprintln!("{run}: {kinds:?}");
            if variant == "fixed" {
                assert!(kinds.is_empty(), "{run}: {kinds:?}");
                continue;
            }
            assert_eq!(
                kinds.first().map(String::as_str),
                Some("n_plus_one"),
                "{run}"
            );
            let f = finding(&report, "n_plus_one").unwrap();
            let summary = f["summary"].as_str().unwrap();
            assert!(
                summary.contains(&format!("ran {ITEMS} times per request")),
                "{run}: {f}"
            );
            let subject = f["subject"].as_str().unwrap();
            assert!(
                subject.starts_with(&format!("{DB}:{} ", db.port())),
                "{run}: {f}"
            );
            let exact = calls_placed(&run, &report, db, clients == "1");
            assert!(exact > 0, "{run}");
            if clients == "8" && db == Db::Redis {
                bad_input(&runs, &files);
            }
        }
        drop(apps);
    }
}

/// One hop behind NAT: the front calls the API at a service address
/// (10.78.9.9:80) that a router between them rewrites to the API's own
/// (10.78.2.2:8080), as kube-proxy and load balancers do. Only the front
/// and the API capture (the API's shifted +41 ms); the API's Redis is on
/// its own loopback. The front's copy and the API's of each connection
/// differ in their addresses, not in their sequence numbers: still joined,
/// the clock still placed, the API's N+1 still named for the front's
/// requests.
#[test]
fn a_hop_behind_nat_is_still_joined() {
    let _one = serial();
    let test = "a_hop_behind_nat_is_still_joined";
    if !can_run(test, &[Need::Tool("nft")]) {
        return;
    }
    let (front, router, api) = (Netns::new("nf"), Netns::new("nr"), Netns::new("na"));
    link(&front, "10.78.1.1/24", &router, "10.78.1.254/24");
    link(&router, "10.78.2.254/24", &api, "10.78.2.2/24");
    for (ns, via) in [(&front, "10.78.1.254"), (&api, "10.78.2.254")] {
        let out = ns
            .command("ip")
            .args(["route", "add", "default", "via", via])
            .output();
        assert!(out.unwrap().status.success());
    }
    let out = router
        .command("sysctl")
        .args(["-qw", "net.ipv4.ip_forward=1"])
        .output();
    assert!(out.unwrap().status.success());
    router.nft(
        "table ip nat {\n chain prerouting {\n  type nat hook prerouting priority -100;\n  \
         ip daddr 10.78.9.9 tcp dport 80 dnat to 10.78.2.2:8080\n }\n}\n",
    );
    let mut redis = api.command("redis-server");
    redis.args([
        "--bind",
        "127.0.0.1",
        "--port",
        "6379",
        "--save",
        "",
        "--appendonly",
        "no",
    ]);
    let _redis = NsServer::start(&api, &mut redis, 6379);
    let items = ITEMS.to_string();
    let api_args = [
        "api",
        "10.78.2.2",
        "8080",
        "127.0.0.1",
        "6379",
        &items,
        "broken",
    ];
    let _api = tiers_app(&api, &api_args, "10.78.2.2", 8080);
    let _front = tiers_app(
        &front,
        &["front", "10.78.1.1", "8000", "10.78.9.9", "80"],
        "10.78.1.1",
        8000,
    );
    let dir = tmpdir(test);
    let (front_cap, api_raw, api_cap) = (
        dir.join("front.pcap"),
        dir.join("api-raw.pcap"),
        dir.join("api.pcap"),
    );
    let hosts = [(&front, &*front_cap), (&api, &api_raw)];
    let url = "http://10.78.1.1:8000/report";
    captured_on(&hosts, &mut || load_in(&front, "4", "80", url));
    shifted(&api_raw, &api_cap, API_SHIFT_US);
    let report = analyzed_hosts(&[front_cap, api_cap]);
    clock_placed("behind NAT", &report, 1, API_SHIFT_US, MAX_BOUND_US);
    let api_host = &report["capture"]["hosts"][1];
    assert!(api_host["copies_left_out"].as_u64() > Some(0), "{api_host}");
    let kinds = causes(&report);
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("n_plus_one"),
        "{kinds:?}"
    );
    let f = finding(&report, "n_plus_one").unwrap();
    assert!(
        f["subject"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:6379 "),
        "{f}"
    );
    assert!(
        f["summary"]
            .as_str()
            .unwrap()
            .contains(&format!("ran {ITEMS} times")),
        "{f}"
    );
}
