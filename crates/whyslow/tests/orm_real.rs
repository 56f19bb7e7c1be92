//! Case 003's N+1 on a real ORM over a real PostgreSQL: a SQLAlchemy app
//! (psycopg2) whose checkout loads each order's items lazily and re-reads a
//! tax rate per order. The app counts the statements it sends; whyslow must
//! see the same counts on the wire and name n_plus_one and duplicate_calls,
//! from `analyze` on a tcpdump capture with no flags and from `diagnose URL`;
//! the fixed app (eager loading, the rate read once) must name neither.
//! The SQL summary per request must hold the counts the app sent, by kind.

mod common;
use common::real::*;
use common::*;
use serde_json::Value;

/// Orders per checkout: one lazy items query and one tax read each.
const ORDERS: u64 = 20;
/// Checkouts in the tcpdump capture.
const PAGES: usize = 3;

const NEEDS: &[Need] = &[
    Need::Tool("tcpdump"),
    Need::Tool("curl"),
    Need::Postgres,
    Need::Python("sqlalchemy"),
    Need::Python("psycopg2"),
    Need::Capture,
];

fn app(pg: u16, variant: &str) -> Server {
    let port = free_port();
    let args = [
        port.to_string(),
        pg.to_string(),
        ORDERS.to_string(),
        variant.into(),
    ];
    python_app("orm_app.py", port, &args)
}

const KINDS: [&str; 6] = ["select", "insert", "update", "delete", "other", "total"];

/// The app's own count of the statements one checkout sent, by kind.
fn app_counts(body: &Value) -> Vec<u64> {
    let sent = &body["statements"];
    let mut v: Vec<u64> = KINDS[..5]
        .iter()
        .map(|k| sent[k].as_u64().unwrap())
        .collect();
    v.push(v.iter().sum());
    v
}

/// A request row of the SQL summary, by kind.
fn summary_counts(row: &Value) -> Vec<u64> {
    KINDS
        .iter()
        .map(|k| row["statements"][k].as_u64().unwrap())
        .collect()
}

fn checkout(url: &str) -> Value {
    let out = std::process::Command::new("curl")
        .args(["-sf", url])
        .output()
        .unwrap();
    assert!(out.status.success(), "curl {url}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// SELECTs on the wire per inbound request, by inbound id.
fn selects_per_request(report: &Value, pg: u16) -> Vec<u64> {
    let t = &report["timeline"];
    let pg_conns: Vec<&Value> = t["connections"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["server"].as_str().unwrap().ends_with(&format!(":{pg}")))
        .map(|c| &c["id"])
        .collect();
    let exchanges = t["exchanges"].as_array().unwrap();
    let inbound: Vec<&Value> = exchanges
        .iter()
        .filter(|e| e["role"] == "inbound")
        .collect();
    inbound
        .iter()
        .map(|i| {
            exchanges
                .iter()
                .filter(|e| e["parent"] == i["id"] && pg_conns.contains(&&e["connection"]))
                .filter(|e| e["request"].as_str().unwrap().starts_with("SELECT"))
                .count() as u64
        })
        .collect()
}

#[test]
fn analyze_sees_the_orms_statements_and_names_n_plus_one() {
    let _one = serial();
    if !requirements_met("orm_n_plus_one", NEEDS) {
        return;
    }
    let (pg, _dir) = postgres();
    let dir = tmpdir("orm");
    for variant in ["broken", "fixed"] {
        let front = app(pg.port, variant);
        let file = dir.join(format!("{variant}.pcap"));
        let url = format!("http://127.0.0.1:{}/checkout", front.port);
        let mut counted = Vec::new();
        let dropped = tcpdump_while(&file, &[front.port, pg.port], || {
            for _ in 0..PAGES {
                counted.push(app_counts(&checkout(&url)));
            }
        });
        assert_eq!(dropped, 0, "tcpdump dropped packets");
        assert!(counted.windows(2).all(|w| w[0] == w[1]), "{counted:?}");
        let out = whyslow(&["analyze", "--json", "--timeline", file.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let report = json(&out);
        assert_eq!(
            selects_per_request(&report, pg.port),
            vec![counted[0][0]; PAGES],
            "{variant}: wire vs app"
        );
        let sql = &report["sql_summary"][0];
        assert_eq!(sql["requests"], PAGES, "{sql}");
        for row in ["median", "worst"] {
            assert_eq!(
                summary_counts(&sql[row]),
                counted[0],
                "{variant} {row}: {sql}"
            );
        }
        let text = serde_json::to_string(&report).unwrap();
        assert!(
            !text.contains("secret-customer"),
            "a literal reached the report"
        );
        let kinds = finding_kinds(&report);
        if variant == "broken" {
            assert_eq!(counted[0][0], 1 + 2 * ORDERS);
            assert_eq!(
                sql["top_by_count"][0]["per_request"], ORDERS as f64,
                "{sql}"
            );
            let n1 = finding(&report, "n_plus_one").unwrap_or_else(|| panic!("{kinds:?}"));
            assert_eq!(n1["occurrences"], PAGES);
            let summary = n1["summary"].as_str().unwrap();
            assert!(
                summary.contains("FROM items") && summary.contains(&format!("ran {ORDERS} times")),
                "{summary}"
            );
            let dup = finding(&report, "duplicate_calls").unwrap_or_else(|| panic!("{kinds:?}"));
            let summary = dup["summary"].as_str().unwrap();
            assert!(
                summary.contains("FROM tax")
                    && summary.contains(&format!("repeated {} times", ORDERS - 1)),
                "{summary}"
            );
        } else {
            assert!(
                !kinds
                    .iter()
                    .any(|k| k == "n_plus_one" || k == "duplicate_calls"),
                "{kinds:?}"
            );
        }
    }
}

#[test]
fn diagnose_names_n_plus_one_on_the_orm_app() {
    let _one = serial();
    if !requirements_met("orm_diagnose", NEEDS) {
        return;
    }
    let (pg, _dir) = postgres();
    let front = app(pg.port, "broken");
    let url = format!("http://127.0.0.1:{}/checkout", front.port);
    let out = whyslow(&["diagnose", "-n", "4", &url]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Asked after the diagnosis: a checkout before it would open the app's
    // database connection before the capture (every checkout sends the same).
    let counted = app_counts(&checkout(&url));
    let text = stdout(&out);
    // The summary's median row: select insert update delete other total.
    let median = text
        .lines()
        .skip_while(|l| !l.starts_with("SQL per request"))
        .find(|l| l.trim_start().starts_with("median"))
        .unwrap_or_else(|| panic!("no SQL summary:\n{text}"));
    let shown: Vec<u64> = median
        .split_whitespace()
        .skip(1)
        .take(6)
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(shown, counted, "{text}");
    for kind in ["n_plus_one", "duplicate_calls"] {
        assert!(text.contains(kind), "{kind} missing:\n{text}");
    }
}

/// The lab's orm-storm checkout (tokio-postgres, extended protocol) over a
/// real PostgreSQL instead of the lab's own: the same statements, counts
/// and findings.
#[test]
fn the_lab_orm_storm_on_a_real_postgresql() {
    use whyslow_lab::scenarios::orm_storm;
    let _one = serial();
    if !requirements_met(
        "orm_storm_real_postgresql",
        &[Need::Postgres, Need::Capture],
    ) {
        return;
    }
    let (pg, _dir) = postgres();
    let db: std::net::SocketAddr = format!("127.0.0.1:{}", pg.port).parse().unwrap();
    rt().block_on(orm_storm::create_shop(db)).unwrap();
    let s = whyslow_lab::find("orm-storm").unwrap();
    lab_orm_storm_holds(s, |fixed| {
        rt().block_on(orm_storm::start_with_database(fixed, db))
            .unwrap()
    });
}
