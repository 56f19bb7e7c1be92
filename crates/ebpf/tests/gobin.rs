//! Go binaries as the uprobes find them: a real Go service built here with
//! the machine's Go (the test app of crates/whyslow/tests/apps/go/gopage,
//! as built, then stripped), and the same bytes cut short and overwritten.
//! Skipped with a printed reason without Go, a failure where
//! WHYSLOW_REQUIRE_CAPTURE=1 (CI installs it).

use std::path::{Path, PathBuf};
use std::process::Command;
use whyslow_ebpf::gobin;

fn have_go() -> bool {
    let ok = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok && std::env::var("WHYSLOW_REQUIRE_CAPTURE").as_deref() == Ok("1") {
        panic!("go is missing (scripts/test.sh installs it)");
    }
    if !ok {
        eprintln!("skipped: go is missing");
    }
    ok
}

/// gopage built into `out` with `ldflags`.
fn built(out: &Path, ldflags: &str) -> Vec<u8> {
    let app = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../whyslow/tests/apps/go/gopage");
    let ok = Command::new("go")
        .args(["build", "-ldflags", ldflags, "-o"])
        .arg(out)
        .arg(".")
        .current_dir(app)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "go build");
    std::fs::read(out).unwrap()
}

#[test]
fn a_go_service_offers_its_tls_and_goroutines_and_a_stripped_one_says_so() {
    if !have_go() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("whyslow-gobin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = built(&dir.join("gopage"), "");
    let found = gobin::read(&data).expect("a Go binary");
    for (name, f) in [
        (gobin::TLS_WRITE, &found.tls_write),
        (gobin::TLS_READ, &found.tls_read),
        (gobin::NEWPROC1, &found.newproc1),
        (gobin::GOEXIT1, &found.goexit1),
    ] {
        let f = f.as_ref().unwrap_or_else(|| panic!("{name} not found"));
        assert!(!f.returns.is_empty(), "{name}: no RET");
        for &at in &f.returns {
            assert!(at > f.entry, "{name}: a return before its entry");
            assert_eq!(data[at as usize], 0xc3, "{name}: {at:#x} is no RET");
        }
        // The machine's Go gives each a stack check, then the frame's push:
        // the probe goes on the push, which the kernel emulates.
        assert!(f.probe_at > f.entry, "{name}: probed at its entry");
        assert_eq!(data[f.probe_at as usize], 0x55, "{name}: no PUSH RBP");
    }
    let stripped = built(&dir.join("gopage-stripped"), "-s -w");
    let why = gobin::read(&stripped).unwrap_err();
    assert!(why.contains("stripped"), "{why}");
    // Cut short anywhere and overwritten: an error or what is left, never
    // a panic.
    for cut in [64, 4096, data.len() / 3, data.len() / 2, data.len() - 1] {
        let _ = gobin::read(&data[..cut]);
    }
    let mut scribbled = data.clone();
    let step = scribbled.len() / 997;
    for i in (0..scribbled.len()).step_by(step.max(1)) {
        scribbled[i] ^= 0x5a;
    }
    let _ = gobin::read(&scribbled);
    std::fs::remove_dir_all(&dir).unwrap();
}
