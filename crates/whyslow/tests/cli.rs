//! The command line itself: completions and the man page from the flag
//! tree, `--json` documents on failure, a closed stdout, and `compare` on
//! the outputs of every command that writes results.

mod common;
use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use whyslow_lab::http1::AppConfig;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_whyslow")
}

/// A small capture the tests already keep (one HTTP exchange).
fn small_pcap() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fuzz/seeds/read_capture/http.pcap"
    )
    .to_string()
}

#[test]
fn bash_completes_commands() {
    let script = format!(
        "source <({} completions bash) || exit 1
COMP_WORDS=(whyslow dia); COMP_CWORD=1
_whyslow whyslow dia whyslow
echo \"${{COMPREPLY[@]}}\"",
        bin()
    );
    let out = Command::new("bash").args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "diagnose", "{}", stderr(&out));
}

#[test]
fn other_shells_get_completions() {
    for (shell, mark) in [("zsh", "#compdef whyslow"), ("fish", "complete -c whyslow")] {
        let out = whyslow(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        assert!(stdout(&out).contains(mark), "{shell}");
        assert!(stdout(&out).contains("keylog-out"), "{shell}");
    }
}

#[test]
fn the_man_page_renders() {
    let have_man = Command::new("man")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have_man {
        eprintln!("skipping the_man_page_renders: `man` is not installed (apt-get install man-db)");
        return;
    }
    let page = whyslow(&["man"]);
    assert!(page.status.success(), "{}", stderr(&page));
    let mut man = Command::new("man")
        .args(["-l", "-"])
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .env("MANWIDTH", "100")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    man.stdin.take().unwrap().write_all(&page.stdout).unwrap();
    let out = man.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for want in [
        "WHYSLOW DIAGNOSE",
        "--keylog-out",
        "EXIT STATUS",
        "bad URL",
        "the capture is truncated or corrupt",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
}

#[test]
fn help_shows_the_exit_codes_and_key_log_flags() {
    let out = whyslow(&["--help"]);
    assert!(out.status.success());
    let help = stdout(&out);
    assert!(help.contains("Exit status:"), "{help}");
    assert!(
        help.contains("  9  analyze: the capture is truncated"),
        "{help}"
    );
    assert!(help.contains("  3  bad URL"), "{help}");
    let probe = stdout(&whyslow(&["probe", "--help"]));
    assert!(probe.contains("--keylog-out <FILE>"), "{probe}");
    assert!(!probe.contains("--keylog <FILE>"), "{probe}");
    let analyze = stdout(&whyslow(&["analyze", "--help"]));
    assert!(analyze.contains("--keylog <FILE>"), "{analyze}");
    assert!(!analyze.contains("--keylog-out"), "{analyze}");
}

/// The exit codes `--help` lists: one meaning per code, in ascending
/// order, and the README shows the same table and notes.
#[test]
fn exit_codes_have_one_meaning_and_the_readme_shows_them() {
    let help = stdout(&whyslow(&["--help"]));
    let table = help.split("Exit status:\n").nth(1).expect("exit table");
    let mut codes = Vec::new();
    let mut markdown = String::from("| code | meaning |\n|---|---|\n");
    let mut notes = Vec::new();
    for line in table.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match line.split_once("  ") {
            Some((code, meaning)) if code.parse::<u8>().is_ok() => {
                codes.push(code.parse::<u8>().unwrap());
                markdown += &format!("| {code} | {} |\n", meaning.replace('|', "\\|"));
            }
            _ => notes.push(line.to_string()),
        }
    }
    assert!(codes.len() >= 10, "{table}");
    assert!(
        codes.windows(2).all(|w| w[0] < w[1]),
        "not one per code, ascending: {codes:?}"
    );
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    assert!(
        readme.contains(&markdown),
        "README.md's exit-code table differs; it should read:\n{markdown}"
    );
    for note in notes {
        assert!(readme.contains(&note), "README lacks {note:?}");
    }
}

/// A JSON document with the error in `errors`.
fn error_document(out: &std::process::Output, command: &str, needle: &str) {
    let doc = json(out);
    assert_eq!(doc["command"], command, "{doc}");
    let errors = doc["errors"].as_array().unwrap();
    assert!(
        errors.iter().any(|e| e.as_str().unwrap().contains(needle)),
        "{needle:?} not in {doc}"
    );
}

#[test]
fn json_failures_print_a_document() {
    let dir = tmpdir("json-failures");
    let not_a_capture = dir.join("notes.txt");
    std::fs::write(&not_a_capture, "these are not packets\n").unwrap();
    let f = not_a_capture.to_str().unwrap();

    let out = whyslow(&["analyze", f, "--json"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    error_document(&out, "analyze", "notes.txt");

    let out = whyslow(&["compare", "--json", f, f]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    error_document(&out, "compare", "notes.txt");

    let out = whyslow(&["merge", "--json", f]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    error_document(&out, "merge", "notes.txt");

    let out = whyslow(&["use", "--json", "--interval", "1ms"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    error_document(&out, "use", "--interval");

    let out = whyslow(&["probe", "--json", "http://"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(!json(&out)["errors"].as_array().unwrap().is_empty());

    let out = whyslow(&["load", "--json", "-n", "5", "http://"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    error_document(&out, "load", "URL");
    std::fs::remove_dir_all(&dir).ok();
}

/// A truncated capture exits 9, not 3 (bad URL).
#[test]
fn truncated_captures_have_their_own_code() {
    let dir = tmpdir("truncated");
    let whole = std::fs::read(small_pcap()).unwrap();
    let cut = dir.join("cut.pcap");
    std::fs::write(&cut, &whole[..whole.len() - 20]).unwrap();
    let out = whyslow(&["analyze", "--json", cut.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(9), "{}", stderr(&out));
    assert!(!json(&out)["errors"].as_array().unwrap().is_empty());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_closed_stdout_ends_every_command_quietly() {
    let dir = tmpdir("closed-stdout");
    let url = format!("http://{}/", app(AppConfig::default()));
    let result = dir.join("load.json");
    let html = dir.join("load.html");
    let pcap = small_pcap();
    let probe = dir.join("probe.json");
    std::fs::write(
        &probe,
        stdout(&whyslow(&["probe", "--json", "-n", "3", &url])),
    )
    .unwrap();
    let p = probe.to_str().unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec!["probe", "-n", "3", &url],
        vec!["probe", "--json", "-n", "3", &url],
        vec!["probe", "-n", "3", "-w", "%{time_total}\n", &url],
        vec![
            "load",
            "--json",
            "-n",
            "40",
            "-c",
            "2",
            "-o",
            result.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
            &url,
        ],
        vec!["load", "-q", "-n", "40", "-c", "2", &url],
        vec!["diagnose", "--no-capture", "-n", "2", &url],
        vec!["analyze", &pcap],
        vec!["analyze", "--json", "--timeline", &pcap],
        vec!["compare", p, p],
        vec!["compare", "--json", p, p],
        vec!["use", "--duration", "100ms", "--interval", "100ms"],
        vec![
            "use",
            "--json",
            "--duration",
            "100ms",
            "--interval",
            "100ms",
        ],
        vec!["lab", "list"],
        vec!["completions", "bash"],
        vec!["man"],
    ];
    for args in &commands {
        closed_stdout(args);
    }
    // What was asked for in files is written all the same.
    assert!(std::fs::metadata(&result).unwrap().len() > 0);
    assert!(std::fs::metadata(&html).unwrap().len() > 0);
    closed_stdout(&["merge", result.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).ok();
}

/// `compare` reads two outputs of one command and compares them.
fn compare_ok(a: &Path, b: &Path) {
    let out = whyslow(&["compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("verdict:"), "{}", stdout(&out));
    let out = whyslow(&[
        "compare",
        "--json",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    json(&out);
}

#[test]
fn compare_reads_every_command_s_results() {
    let s = whyslow_lab::find("healthy").unwrap();
    let running = rt().block_on(s.start(false)).unwrap();
    let url = running.url.clone();
    let dir = tmpdir("compare");
    let capture = capture_allowed("compare_reads_every_command_s_results");
    for command in ["probe", "diagnose", "load"] {
        let mut files = Vec::new();
        for i in 0..2 {
            let file = dir.join(format!("{command}-{i}.json"));
            let f = file.to_str().unwrap();
            let mut args: Vec<&str> = match command {
                "probe" => vec!["probe", "--json", "-n", "5"],
                "diagnose" => vec!["diagnose", "--json", "-n", "3"],
                _ => vec!["load", "-q", "-n", "100", "-c", "2", "-o", f],
            };
            if command == "diagnose" && !capture {
                args.push("--no-capture");
            }
            args.push(&url);
            let out = whyslow(&args);
            assert!(out.status.success(), "{args:?}: {}", stderr(&out));
            if command != "load" {
                std::fs::write(&file, &out.stdout).unwrap();
            }
            files.push(file);
        }
        compare_ok(&files[0], &files[1]);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Lines the binary's source may hold: fourteen commands of flag parsing
/// and wiring, ~130 lines each at most, `lab`'s three commands for
/// scenarios on several hosts (hosts, link, tier: their flags, and a call
/// into the lab crate each), and the workload flags capture, diagnose and
/// agent share (--pid, --container, --cgroup, --host-root), and the OTLP
/// exporter's flags analyze, diagnose and agent share (--otlp-endpoint,
/// --otlp-protocol, --otlp-header, --otlp-ca: the flags alone, what they
/// mean read in the investigate crate). The one bound; it moves only with a
/// reason in the commit that moves it.
const BINARY_MAX_LINES: usize = 2_000;

/// The binary holds flags, wiring and exit codes (under `BINARY_MAX_LINES`),
/// and nothing in it reaches the detectors, the protocol parsers or /proc.
#[test]
fn the_binary_stays_thin() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src];
    let mut lines = 0;
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        lines += text.lines().count();
        for reach in [
            "whyslow_detect",
            "whyslow_host",
            "/proc/",
            "proto::parse",
            "::analyzer",
        ] {
            assert!(!text.contains(reach), "{} uses {reach}", p.display());
        }
    }
    assert!(
        lines < BINARY_MAX_LINES,
        "crates/whyslow/src holds {lines} lines"
    );
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let deps = manifest.split("[dev-dependencies]").next().unwrap();
    assert!(
        !deps.contains("whyslow-detect") && !deps.contains("whyslow-host"),
        "{deps}"
    );
}
