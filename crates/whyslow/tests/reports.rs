//! Reports people look at: `--html` on diagnose and load, opened in a real
//! headless Chromium (no console message, no fetch, a screenshot); `compare`
//! on runs of the same target and on broken against fixed; `use` while the
//! CPU is saturated on purpose.

mod common;
use common::real::{requirements_met, Need};
use common::*;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use whyslow_lab::Scenario;

// Diagnoses measure kernel timers and loads measure latency: one at a time
// (`serial()`), and never beside a browser.

fn scenario(name: &str) -> &'static Scenario {
    whyslow_lab::find(name).unwrap()
}

fn url(s: &Scenario, fixed: bool) -> (whyslow_lab::Running, String) {
    let running = rt().block_on(s.start(fixed)).unwrap();
    let url = running.url.clone();
    (running, url)
}

/// Opens `html` in headless Chromium: fails on any console message (errors,
/// and every blocked fetch, which CSP reports there) and leaves a screenshot.
fn open_in_chromium(test: &str, html: &Path) -> Option<std::path::PathBuf> {
    if !requirements_met(test, &[Need::Tool("chromium")]) {
        return None;
    }
    let png = html.with_extension("png");
    let out = Command::new("timeout")
        .args([
            "120",
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
        ])
        .args(["--hide-scrollbars", "--enable-logging=stderr", "--v=0"])
        .arg("--window-size=1200,2400")
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("run chromium");
    let log = String::from_utf8_lossy(&out.stderr);
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(
        console.is_empty(),
        "{}: console: {console:#?}",
        html.display()
    );
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 10_000,
        "{}: no screenshot ({size} bytes): {log}",
        png.display()
    );
    Some(png)
}

/// Runs whyslow with `args` and `--html file`; the page it wrote.
fn html_report(file: &Path, args: &[&str]) -> String {
    let mut args = args.to_vec();
    args.extend(["--html", file.to_str().unwrap()]);
    let out = whyslow(&args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    std::fs::read_to_string(file).unwrap()
}

/// Every SVG in the page parses as XML; their count.
fn svgs_parse(html: &str) -> usize {
    let mut n = 0;
    let mut rest = html;
    while let Some(start) = rest.find("<svg") {
        let end = rest[start..].find("</svg>").expect("closed svg") + start + 6;
        roxmltree::Document::parse(&rest[start..end])
            .unwrap_or_else(|e| panic!("SVG is not XML: {e}"));
        n += 1;
        rest = &rest[end..];
    }
    n
}

/// The section of `html` from `heading` to the next h2.
fn section<'a>(html: &'a str, heading: &str) -> &'a str {
    let start = html
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?}"));
    let end = html[start + 4..]
        .find("<h2>")
        .map_or(html.len(), |e| e + start + 4);
    &html[start..end]
}

#[test]
fn csp_blocked_fetches_show_in_the_console_check() {
    let _one = serial();
    // The browser check must be able to fail: a page that tries to fetch.
    let dir = tmpdir("reports-bad");
    let bad = dir.join("bad.html");
    let page = format!(
        "<!DOCTYPE html><html><head><meta http-equiv=\"Content-Security-Policy\" content=\"{}\"></head>\
         <body><img src=\"http://127.0.0.1:9/x.png\"></body></html>",
        whyslow_report::html::CSP
    );
    std::fs::write(&bad, page).unwrap();
    if !requirements_met("csp_blocked_fetches", &[Need::Tool("chromium")]) {
        return;
    }
    let caught = std::panic::catch_unwind(|| open_in_chromium("csp", &bad));
    assert!(caught.is_err(), "a blocked fetch must fail the check");
}

/// The page's packet ladders show a Nagle × delayed-ACK stall: one
/// delayed-ACK timer (≥ 40 ms on Linux) between two rows.
fn assert_stall_ladder(html: &str) {
    let ladder = section(html, "<h2>Packet ladders</h2>");
    assert!(ladder.contains("nagle_delayed_ack"), "{ladder}");
    let stalls: Vec<f64> = ladder
        .split("class=\"stall\">+")
        .skip(1)
        .filter_map(|t| t.split(" ms").next()?.parse().ok())
        .collect();
    assert!(
        stalls.iter().any(|ms| (38.0..=250.0).contains(ms)),
        "{stalls:?}"
    );
    assert!(svgs_parse(html) >= 2);
}

#[test]
fn diagnose_html_shows_the_stall_ladder_and_the_pool_waterfall() {
    let _one = serial();
    if !capture_allowed("diagnose_html_shows_the_stall_ladder_and_the_pool_waterfall") {
        return;
    }
    let dir = tmpdir("reports-diagnose");
    // post-stall: the ladder of a Nagle × delayed-ACK stall.
    let s = scenario("post-stall");
    let (_running, u) = url(s, false);
    let file = dir.join("post-stall.html");
    let pcap = dir.join("post-stall.pcapng");
    let pcap = pcap.to_str().unwrap();
    let args = ["diagnose", "-X", s.method, "-d", s.body, "--save", pcap, &u];
    let html = html_report(&file, &args);
    assert_stall_ladder(&html);
    open_in_chromium("diagnose post-stall", &file);
    // analyze --html on the same capture draws the same ladder.
    let file = dir.join("post-stall-analyze.html");
    let html = html_report(&file, &["analyze", pcap]);
    assert_stall_ladder(&html);
    open_in_chromium("analyze post-stall", &file);

    // fanout-pool: a row per call, and the calls after the first round
    // waiting for a connection, under load as without.
    let s = scenario("fanout-pool");
    let calls = s.truth.fact("calls").unwrap();
    let pool = s.truth.fact("pool").unwrap();
    let mut queued_pixels = Vec::new();
    for fixed in [false, true] {
        let (running, u) = url(s, fixed);
        let name = if fixed { "fanout-fixed" } else { "fanout-pool" };
        let file = dir.join(format!("{name}.html"));
        let backing = running.ports[1].to_string();
        let args = [
            "diagnose",
            "--port",
            &backing,
            "--rate",
            "20",
            "--duration",
            "3s",
            &u,
        ];
        let html = html_report(&file, &args);
        let waterfall = section(&html, "<h2 id=\"waterfall\">Waterfall</h2>");
        let first = &waterfall[..waterfall.find("</svg>").unwrap()];
        assert_eq!(
            first.matches("class=\"wait\"").count() as u64,
            calls,
            "every call of the request is drawn: {first}"
        );
        let rows = first.matches(&format!(":{backing} conn #")).count() as u64;
        assert_eq!(rows, calls, "a row per call: {first}");
        let queued = first.matches("class=\"queued\"").count() as u64;
        if fixed {
            assert_eq!(
                queued, 0,
                "one multiplexed connection queues nothing: {first}"
            );
        } else {
            assert_eq!(distinct_connections(first, &backing), pool, "{first}");
            assert!(
                queued >= calls - pool,
                "rounds two and three queued: {first}"
            );
        }
        assert!(svgs_parse(&html) >= 2);
        if let Some(png) = open_in_chromium(&format!("diagnose {name}"), &file) {
            queued_pixels.push(pixels_of(&png, QUEUED_RGB));
            let _ = std::fs::copy(&png, dir.join(format!("waterfall-{name}.png")));
        }
    }
    if let [broken, fixed] = queued_pixels[..] {
        // The legend's swatch is the fixed page's only queueing colour.
        assert!(fixed <= LEGEND_PIXELS_MAX, "fixed: {fixed} queueing pixels");
        assert!(
            broken > fixed + 1_000,
            "broken: {broken} queueing pixels, fixed {fixed}"
        );
    }
}

/// The queueing bars' colour (`svg .queued`).
const QUEUED_RGB: [u8; 3] = [0x8e, 0x44, 0xad];
/// Two waterfalls' legend swatches of 12 × 10 pixels, with room for scaling.
const LEGEND_PIXELS_MAX: usize = 2 * 12 * 10 * 2;

/// Connections the rows of a waterfall name for `port`.
fn distinct_connections(svg: &str, port: &str) -> u64 {
    let mark = format!(":{port} conn #");
    let ids: std::collections::BTreeSet<&str> = svg
        .split(&mark)
        .skip(1)
        .filter_map(|rest| rest.split(['<', ' ']).next())
        .collect();
    ids.len() as u64
}

/// Pixels of exactly `rgb` in a screenshot.
fn pixels_of(png_file: &Path, rgb: [u8; 3]) -> usize {
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png_file).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let step = info.color_type.samples();
    assert!(step >= 3, "{:?}", info.color_type);
    buf[..info.buffer_size()]
        .chunks(step)
        .filter(|p| p[..3] == rgb)
        .count()
}

#[test]
fn load_html_shows_histogram_spectrum_and_latency_over_time() {
    let _one = serial();
    let (_running, u) = url(scenario("healthy"), false);
    let dir = tmpdir("reports-load");
    let file = dir.join("load.html");
    let html = html_report(
        &file,
        &[
            "load",
            "--rate",
            "200",
            "--duration",
            "3s",
            "-c",
            "4",
            "--interval",
            "500ms",
            "-q",
            &u,
        ],
    );
    for label in [
        "latency histogram",
        "percentile spectrum",
        "ms over time",
        "responses/s over time",
    ] {
        assert!(html.contains(&format!("aria-label=\"{label}\"")), "{label}");
    }
    // The histogram's bars hold every response.
    let bars: u64 = html
        .split("class=\"hist\"><title>")
        .skip(1)
        .filter_map(|t| {
            t.split("</title>")
                .next()?
                .rsplit(": ")
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert!(
        (500..=700).contains(&bars),
        "{bars} responses in the histogram"
    );
    // Two lines on the spectrum (corrected, uncorrected), 5 points over time at least.
    let spectrum = &html[html.find("aria-label=\"percentile spectrum\"").unwrap()..];
    let spectrum = &spectrum[..spectrum.find("</svg>").unwrap()];
    assert_eq!(spectrum.matches("<polyline").count(), 2);
    assert_eq!(svgs_parse(&html), 4);
    open_in_chromium("load", &file);
}

fn load_result(url: &str, file: &Path, extra: &[&str]) {
    let f = file.to_str().unwrap();
    let mut args = vec![
        "load",
        "--rate",
        "100",
        "--duration",
        "2s",
        "-c",
        "4",
        "-q",
        "-o",
        f,
    ];
    args.extend_from_slice(extra);
    args.push(url);
    let out = whyslow(&args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
}

#[test]
fn compare_says_no_change_on_the_same_target_and_gates_a_regression() {
    let _one = serial();
    let dir = tmpdir("reports-compare");
    let (_healthy, u) = url(scenario("healthy"), false);
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    // A first run warms the target up (lazy connections, page cache), as wrk's users do.
    load_result(&u, &a, &[]);
    // A busy neighbour on this shared machine can slow one run's tail: the
    // same target must come out unchanged in one of three pairs of runs.
    let mut seen = Vec::new();
    for _ in 0..3 {
        load_result(&u, &a, &[]);
        load_result(&u, &b, &[]);
        let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
        let out = whyslow(&["compare", "--fail-if", "p99>+10%", a, b]);
        let text = stdout(&out);
        if out.status.code() == Some(0) && text.contains("verdict: no significant change") {
            seen.clear();
            break;
        }
        seen.push(format!("{:?}\n{text}{}", out.status.code(), stderr(&out)));
    }
    assert!(seen.is_empty(), "every pair differed: {seen:#?}");

    // post-stall, clients that split writes without TCP_NODELAY: fixed → broken.
    let s = scenario("post-stall");
    let split = [
        "-X",
        s.method,
        "-d",
        s.body,
        "--write",
        "split",
        "--nodelay",
        "off",
    ];
    let (fixed, broken) = (dir.join("fixed.json"), dir.join("broken.json"));
    let (_f, fu) = url(s, true);
    load_result(&fu, &fixed, &split);
    let (_b, bu) = url(s, false);
    load_result(&bu, &broken, &split);
    let (fixed, broken) = (fixed.to_str().unwrap(), broken.to_str().unwrap());
    let html = dir.join("compare.html");
    let out = whyslow(&[
        "compare",
        "--json",
        "--fail-if",
        "p99>+10%",
        "--html",
        html.to_str().unwrap(),
        fixed,
        broken,
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the gate is crossed: {}",
        stdout(&out)
    );
    let c = json(&out);
    let p50 = c["stats"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == "corrected" && s["stat"] == "p50")
        .unwrap();
    assert_eq!(p50["change"], "slower", "{p50}");
    // The injected delayed ACK: tens of milliseconds added to the median.
    let added = p50["b_us"].as_u64().unwrap() - p50["a_us"].as_u64().unwrap();
    assert!((30_000..250_000).contains(&added), "{added} µs");
    assert_eq!(c["checks"][0]["passed"], false);
    // And back: broken → fixed is faster and passes the gate.
    let out = whyslow(&["compare", "--fail-if", "p99>+10%", broken, fixed]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("faster"), "{}", stdout(&out));
    open_in_chromium("compare", &html);
}

/// Case 000 diagnosed broken and fixed: the fix moves the split-write probe
/// and leaves the request as given where it was. `compare` of the two
/// documents says so section by section, and a gate on the split section
/// (or one naming no section) fails the other way round.
#[test]
fn compare_of_diagnoses_names_the_section_the_fix_moved() {
    let _one = serial();
    let dir = tmpdir("reports-compare-diagnose");
    let s = scenario("post-stall");
    let mut files = Vec::new();
    for fixed in [false, true] {
        let (_running, u) = url(s, fixed);
        // Ten requests a pattern: the first ones on a new connection are
        // quick-acked and fast even when broken, and of five the shift test
        // can miss a shift (p 0.095 when one fast broken request beats every
        // fixed one).
        let args = [
            "diagnose", "--json", "-n", "10", "-X", s.method, "-d", s.body, &u,
        ];
        let out = whyslow(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let file = dir.join(if fixed { "fixed.json" } else { "broken.json" });
        std::fs::write(&file, &out.stdout).unwrap();
        files.push(file.to_str().unwrap().to_string());
    }
    let (broken, fixed) = (files[0].as_str(), files[1].as_str());
    let out = whyslow(&["compare", "--json", broken, fixed]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let c = json(&out);
    let split = c["shifts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["metric"] == "split.total")
        .unwrap_or_else(|| panic!("no split section compared: {c}"));
    assert_eq!(split["change"], "faster", "{split}");
    assert!(split["p_value"].as_f64().unwrap() < 0.05, "{split}");
    // The section's own gate names it; a gate over every section names the
    // first that crossed its limit, which may be another that moved too (a
    // fresh connection's p50 on a busy host).
    for (rule, named) in [
        ("split.total.p50>+10%", "FAILED (split.total p50: slower"),
        ("p50>+10%", " p50: slower"),
    ] {
        let out = whyslow(&["compare", "--fail-if", rule, fixed, broken]);
        assert_eq!(out.status.code(), Some(1), "{rule}: {}", stdout(&out));
        assert!(
            stdout(&out).contains(named) && stdout(&out).contains("FAILED ("),
            "{rule}: {}",
            stdout(&out)
        );
        let out = whyslow(&["compare", "--fail-if", rule, broken, fixed]);
        assert_eq!(out.status.code(), Some(0), "{rule}: {}", stdout(&out));
    }
}

#[test]
fn compare_refuses_what_it_cannot_compare() {
    let dir = tmpdir("reports-compare-bad");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"format\":\"whyslow-load-result\",\"version\":1}").unwrap();
    let missing = dir.join("missing.json");
    let (bad, missing) = (bad.to_str().unwrap(), missing.to_str().unwrap());
    for args in [
        vec!["compare", bad, bad],
        vec!["compare", missing, bad],
        vec!["compare", "--fail-if", "p42>1", bad, bad],
    ] {
        let out = whyslow(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&out).contains("whyslow:"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn use_reports_every_resource_and_names_a_saturated_cpu() {
    let _one = serial();
    let out = whyslow(&["use", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r = json(&out);
    let sample = &r["samples"][0]["resources"];
    let names: Vec<&str> = sample
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["resource"].as_str().unwrap())
        .collect();
    assert_eq!(names, whyslow_host::RESOURCES);
    assert!(
        sample[0]["utilization_pct"].as_f64().is_some(),
        "cpu utilization is read"
    );

    // Saturate every CPU twice over, for a bounded time, while `use` samples.
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let stop = Arc::new(AtomicBool::new(false));
    let spinners: Vec<_> = (0..cpus * 2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(20);
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                }
                x
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let out = whyslow(&["use", "--json", "--duration", "2s"]);
    stop.store(true, Ordering::Relaxed);
    for s in spinners {
        let _ = s.join();
    }
    let r = json(&out);
    let f = finding(&r, "host_saturated").unwrap_or_else(|| panic!("{r:#}"));
    assert!(f["summary"].as_str().unwrap().contains("cpu"), "{f}");
}

#[test]
fn demo_html_has_each_run_with_its_ladder() {
    let _one = serial();
    if !capture_allowed("demo_html_has_each_run_with_its_ladder") {
        return;
    }
    let dir = tmpdir("reports-demo");
    let file = dir.join("demo.html");
    let out = whyslow(&[
        "demo",
        "--only",
        "post-stall",
        "--json",
        "--html",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Broken against fixed, as `compare` judges it: the whole distribution
    // of totals shifted faster (6 probes each: too few for a median's
    // interval, enough for Mann–Whitney).
    let doc = json(&out);
    let total = doc["comparisons"][0]["shifts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == "total")
        .cloned()
        .expect("totals compared");
    assert_eq!(total["change"], "faster", "{total}");
    let html = std::fs::read_to_string(&file).unwrap();
    let from_broken = &html[html.find("post-stall (broken)").expect("broken run")..];
    let fixed_at = from_broken.find("post-stall (fixed)").expect("fixed run");
    assert!(from_broken[..fixed_at].contains("Packet ladders"));
    assert!(
        !from_broken[fixed_at..].contains("Packet ladders"),
        "the fixed run has no stall"
    );
    svgs_parse(&html);
    open_in_chromium("demo", &file);
}
