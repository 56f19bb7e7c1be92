//! Backing services on the wire, with real servers from Debian packages
//! (redis-server, memcached, PostgreSQL, nghttpd) driven by real clients
//! (redis-py, pymemcache, psql, pgbench, nghttp, h2load), captured live with
//! `whyslow capture` and analyzed with `whyslow analyze`:
//! - every request the clients sent is an exchange of the right protocol,
//!   answered, and the counts agree with tshark's dissectors on the same file;
//! - none of the literal values sent appears anywhere in the report;
//! - an app's backing calls are attributed to the inbound request they
//!   served, with no `--service` flag.

mod common;
use common::real::*;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

// One capture at a time (`serial()`): each starts servers and listens on lo.

/// Extended-protocol SELECTs pgbench sends with `-S -t`.
const PGBENCH_SELECTS: usize = 20;
/// Rows pgbench -i -s 1 loads into pgbench_accounts with COPY.
const PGBENCH_ACCOUNTS: u64 = 100_000;

/// Requests h2load sends over one prior-knowledge connection.
const H2LOAD_REQUESTS: usize = 10;

/// Values the clients send that must never reach a report.
const SECRETS: &[&str] = &[
    "s3cr3t-redis-value",
    "u48151623x",
    "v-secret-",
    "c9931x",
    "mc-secret-value",
    "s9f86d081x",
    "pg-secret-4111",
    "n4me-secret",
    "h2-secret-token",
];

/// Servers, clients and capture both tests need.
const NEEDS: &[Need] = &[
    Need::Tool("redis-server"),
    Need::Tool("memcached"),
    Need::Tool("nghttpd"),
    Need::Tool("nghttp"),
    Need::Tool("h2load"),
    Need::Tool("pgbench"),
    Need::Tool("python3"),
    Need::Postgres,
    Need::Capture,
];

fn apps_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps")
}

/// `whyslow capture` on lo for `ports` while `script` runs in sh.
fn capture(file: &Path, ports: &[u16], script: &str) {
    let mut args: Vec<String> = vec!["capture".into(), "-i".into(), "lo".into()];
    for p in ports {
        args.extend(["-p".into(), p.to_string()]);
    }
    args.extend(["-w".into(), file.to_str().unwrap().into(), "--".into()]);
    args.extend(["sh".into(), "-ec".into(), script.into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = whyslow(&args);
    assert!(
        out.status.success(),
        "capture: {}\n{}",
        stderr(&out),
        stdout(&out)
    );
}

fn analyze(file: &Path, extra: &[&str]) -> (Value, String) {
    let f = file.to_str().unwrap();
    let mut args = vec!["analyze", "--json", "--timeline", f];
    args.extend_from_slice(extra);
    let out = whyslow(&args);
    assert!(out.status.success(), "analyze: {}", stderr(&out));
    (json(&out), stdout(&out))
}

fn requests(ex: &[&Value]) -> Vec<String> {
    ex.iter()
        .map(|e| e["request"].as_str().unwrap().to_string())
        .collect()
}

fn count(ex: &[&Value], request: &str) -> usize {
    ex.iter().filter(|e| e["request"] == request).count()
}

fn answered(e: &Value) -> bool {
    e["response_first_at_us"].is_u64()
}

#[test]
fn four_real_servers_every_request_an_exchange_agreeing_with_tshark() {
    let _one = serial();
    let test = "four_real_servers";
    if !requirements_met(test, NEEDS) || !requirements_met(test, &[Need::Tool("tshark")]) {
        return;
    }
    let dir = tmpdir("four");
    std::fs::write(dir.join("a.txt"), "a".repeat(1000)).unwrap();
    std::fs::write(dir.join("b.txt"), "b".repeat(20_000)).unwrap();
    let (redis, mc, h2) = (redis(), memcached(), nghttpd(&dir));
    let (pg, _pg_dir) = postgres();
    let file = dir.join("four.pcapng");
    let (r, m, p, h) = (redis.port, mc.port, pg.port, h2.port);
    let pg_conn = format!("-h 127.0.0.1 -p {p} -U postgres");
    let script = format!(
        "{python} {apps}/clients.py {r} {m} >{dir}/sent.json
         psql {pg_conn} -X -q -c \"SELECT 'pg-secret-4111' AS a; SELECT 2 AS b\"
         psql {pg_conn} -X -q -c \"CREATE TABLE people (id int, name text)\"
         psql {pg_conn} -X -q -c \"INSERT INTO people VALUES (1, 'n4me-secret'), (2, 'n4me-secret-2')\"
         psql {pg_conn} -X -q -c \"SELECT * FROM no_such_table\" 2>/dev/null || true
         pgbench {pg_conn} -i -s 1 -q postgres 2>/dev/null
         pgbench {pg_conn} -M prepared -S -t {PGBENCH_SELECTS} -c 1 postgres >/dev/null 2>&1
         nghttp -n 'http://127.0.0.1:{h}/a.txt?t=h2-secret-token' http://127.0.0.1:{h}/b.txt
         h2load -n {H2LOAD_REQUESTS} -c 1 http://127.0.0.1:{h}/a.txt >/dev/null",
        python = python(),
        apps = apps_dir().display(),
        dir = dir.display(),
    );
    capture(&file, &[r, m, p, h], &script);
    let sent: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("sent.json")).unwrap()).unwrap();
    let (report, text) = analyze(&file, &[]);

    check_redis(&report, &file, r, sent["redis"].as_u64().unwrap() as usize);
    check_memcached(
        &report,
        &file,
        m,
        sent["memcached"].as_u64().unwrap() as usize,
    );
    check_postgres(&report, &file, p);
    check_http2(&report, &file, h);
    for secret in SECRETS {
        assert!(!text.contains(secret), "{secret} leaked into the report");
    }
}

fn check_redis(report: &Value, file: &Path, port: u16, sent: usize) {
    let ex = exchanges_to(report, port);
    assert!(ex.iter().all(|e| e["protocol"] == "redis"), "{ex:?}");
    assert_eq!(ex.len(), sent, "redis commands: {:?}", requests(&ex));
    assert!(ex.iter().all(|e| answered(e)), "every command answered");
    assert_eq!(count(&ex, "SET item:?:price"), 50, "{:?}", requests(&ex));
    assert_eq!(count(&ex, "GET user:?:token"), 1);
    // tshark's RESP dissector: one array per command sent to the server.
    let tshark = tshark_fields(
        file,
        &format!("tcp.port=={port},resp"),
        &format!("tcp.dstport=={port}"),
        "resp.array.length",
    );
    assert_eq!(ex.len(), tshark.len(), "whyslow vs tshark RESP commands");
}

fn check_memcached(report: &Value, file: &Path, port: u16, sent: usize) {
    let ex = exchanges_to(report, port);
    assert!(ex.iter().all(|e| e["protocol"] == "memcached"), "{ex:?}");
    assert_eq!(ex.len(), sent, "memcached commands: {:?}", requests(&ex));
    // The noreply set gets no answer; every other command does.
    assert_eq!(ex.iter().filter(|e| !answered(e)).count(), 1, "{ex:?}");
    let multi = ex
        .iter()
        .find(|e| {
            e["request"]
                .as_str()
                .unwrap()
                .starts_with("get sess:?:cart (+")
        })
        .expect("multi-key get");
    assert_eq!(multi["rows"], 2, "two of three keys found");
    let tshark = tshark_fields(
        file,
        &format!("tcp.port=={port},memcache"),
        &format!("tcp.dstport=={port}"),
        "memcache.command",
    );
    assert_eq!(
        ex.len(),
        tshark.len(),
        "whyslow vs tshark memcache commands"
    );
}

fn check_postgres(report: &Value, file: &Path, port: u16) {
    let ex = exchanges_to(report, port);
    assert!(ex.iter().all(|e| e["protocol"] == "postgres"), "{ex:?}");
    let reqs = requests(&ex);
    assert!(reqs.contains(&"SELECT ? AS a".to_string()), "{reqs:?}");
    assert!(reqs.contains(&"SELECT ? AS b".to_string()), "{reqs:?}");
    let error = ex
        .iter()
        .find(|e| e["status"]["sqlstate"] == "42P01")
        .expect("the missing table's error");
    assert_eq!(error["request"], "SELECT * FROM no_such_table");
    let copy = ex
        .iter()
        .find(|e| {
            e["request"]
                .as_str()
                .unwrap()
                .starts_with("COPY pgbench_accounts")
        })
        .expect("pgbench's COPY");
    assert_eq!(copy["rows"], PGBENCH_ACCOUNTS);
    let selects: Vec<_> = ex
        .iter()
        .filter(|e| e["request"] == "SELECT abalance FROM pgbench_accounts WHERE aid = $1")
        .collect();
    assert_eq!(selects.len(), PGBENCH_SELECTS, "{reqs:?}");
    assert!(selects.iter().all(|e| e["params_digest"].is_string()));
    // Every statement the server ran ends in CommandComplete or ErrorResponse.
    let tshark = tshark_fields(
        file,
        &format!("tcp.port=={port},pgsql"),
        &format!("tcp.srcport=={port}"),
        "pgsql.type",
    );
    let done = tshark
        .iter()
        .filter(|t| *t == "Command completion" || *t == "Error")
        .count();
    assert_eq!(ex.len(), done, "whyslow vs tshark statements: {reqs:?}");
}

fn check_http2(report: &Value, file: &Path, port: u16) {
    let ex = exchanges_to(report, port);
    assert!(ex.iter().all(|e| e["protocol"] == "http2"), "{ex:?}");
    assert_eq!(
        count(&ex, "GET /a.txt"),
        1 + H2LOAD_REQUESTS,
        "{:?}",
        requests(&ex)
    );
    assert_eq!(count(&ex, "GET /b.txt"), 1, "{:?}", requests(&ex));
    assert!(ex.iter().all(|e| e["status"]["http"] == 200), "{ex:?}");
    assert!(ex.iter().all(|e| e["stream"].is_u64()));
    let big = ex.iter().find(|e| e["request"] == "GET /b.txt").unwrap();
    assert!(big["response_bytes"].as_u64().unwrap() > 20_000);
    // One client HEADERS frame per request (nghttp's PRIORITY-only streams are none).
    let headers = tshark_fields(
        file,
        &format!("tcp.port=={port},http2"),
        &format!("tcp.dstport=={port}"),
        "http2.type",
    )
    .iter()
    .filter(|t| *t == "1")
    .count();
    assert_eq!(ex.len(), headers, "whyslow vs tshark HTTP/2 requests");
}

/// Requests the app under test gets.
const APP_REQUESTS: usize = 8;

#[test]
fn an_apps_backing_calls_belong_to_the_requests_they_served() {
    let _one = serial();
    if !requirements_met("app_backing_calls", NEEDS) {
        return;
    }
    let dir = tmpdir("app");
    let redis = redis();
    let (pg, _pg_dir) = postgres();
    let http = free_port();
    let mut app = Command::new(python())
        .arg(apps_dir().join("backing_app.py"))
        .args([http, redis.port, pg.port].map(|p| p.to_string()))
        .spawn()
        .unwrap();
    wait_listening(http);
    let urls: Vec<String> = (0..APP_REQUESTS)
        .map(|i| format!("http://127.0.0.1:{http}/item/k{i}z"))
        .collect();
    let file = dir.join("app.pcapng");
    let script = format!("curl -sf -o /dev/null {}", urls.join(" -o /dev/null "));
    capture(&file, &[http, redis.port, pg.port], &script);
    let _ = app.kill();
    let _ = app.wait();
    let (report, _) = analyze(&file, &[]);
    let inbound = exchanges_to(&report, http);
    assert_eq!(inbound.len(), APP_REQUESTS);
    assert!(inbound.iter().all(|e| e["role"] == "inbound"));
    for backing in [redis.port, pg.port] {
        let calls = exchanges_to(&report, backing);
        assert_eq!(
            calls.len(),
            APP_REQUESTS,
            "one call per request to :{backing}"
        );
        let mut parents: Vec<u64> = calls
            .iter()
            .map(|c| {
                assert_eq!(c["role"], "outbound");
                c["parent"].as_u64().expect("attributed")
            })
            .collect();
        parents.sort_unstable();
        let mut ids: Vec<u64> = inbound.iter().map(|e| e["id"].as_u64().unwrap()).collect();
        ids.sort_unstable();
        assert_eq!(parents, ids, "each request's own call to :{backing}");
        for c in &calls {
            let parent = inbound.iter().find(|e| e["id"] == c["parent"]).unwrap();
            let (start, answer) = (
                us(parent, "request_first_at_us"),
                us(parent, "response_first_at_us"),
            );
            assert!(
                us(c, "request_first_at_us") >= start && us(c, "response_last_at_us") <= answer
            );
        }
    }
    // Cut into windows of 1 and 3 finished exchanges, the capture gives the
    // same answer: no request is split from its calls.
    let parents = |r: &Value| -> Vec<(u64, Option<u64>)> {
        r["timeline"]["exchanges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["id"].as_u64().unwrap(), e["parent"].as_u64()))
            .collect()
    };
    for window in ["1", "3"] {
        let (small, _) = analyze(&file, &["--window", window]);
        assert_eq!(parents(&small), parents(&report), "--window {window}");
        assert_eq!(small["capture"]["groups"], report["capture"]["groups"]);
        assert!(small["capture"]["windows"].as_u64().unwrap() > 1);
        assert_eq!(small["capture"]["windows_forced"], 0);
    }
    // The text report lists the calls under the request kind they served.
    let out = whyslow(&["analyze", file.to_str().unwrap()]);
    let text = stdout(&out);
    assert!(text.contains(&format!("service :{http} (found")), "{text}");
    let kind = text
        .lines()
        .find(|l| l.trim_start().starts_with("GET /item/?"))
        .expect(&text);
    assert!(
        kind.contains(&format!(" {APP_REQUESTS} ")),
        "one kind for every id: {kind}"
    );
    assert!(
        text.contains(&format!("→ redis :{} GET item:?:name", redis.port)),
        "{text}"
    );
    assert!(text.contains(&format!("→ postgres :{}", pg.port)), "{text}");
}
