//! `load --segment`, as a Kubernetes Indexed Job runs it: four processes,
//! each told its index by JOB_COMPLETION_INDEX, merged, make the run one
//! process makes at the total rate.

mod common;

use common::segments::{load_args, same_run, WORK};
use common::*;
use std::process::{Command, Stdio};

#[test]
fn four_indexed_segments_merged_are_one_run_at_the_total_rate() {
    let _g = serial();
    let addr = app(whyslow_lab::http1::AppConfig {
        work: WORK,
        ..Default::default()
    });
    let url = format!("http://{addr}/");
    let dir = tmpdir("segments");
    let single = dir.join("single.json");
    let args = load_args(&url, &single);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = whyslow(&args);
    assert!(out.status.success(), "{}", stderr(&out));

    let parts: Vec<_> = (0..4).map(|i| dir.join(format!("part-{i}.json"))).collect();
    let children: Vec<_> = parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            Command::new(env!("CARGO_BIN_EXE_whyslow"))
                .args(load_args(&url, part))
                .args(["--segment", "4"])
                .env("JOB_COMPLETION_INDEX", i.to_string())
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    same_run(&single, &parts);
}

#[test]
fn a_segment_past_its_count_or_without_an_index_is_refused() {
    for (segment, env) in [("4/4", None), ("4", None), ("0/0", None), ("4", Some("x"))] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_whyslow"));
        c.args([
            "load",
            "--segment",
            segment,
            "-n",
            "1",
            "http://127.0.0.1:9/",
        ]);
        c.env_remove("JOB_COMPLETION_INDEX");
        if let Some(v) = env {
            c.env("JOB_COMPLETION_INDEX", v);
        }
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{segment}: {}", stderr(&out));
        assert!(stderr(&out).contains("--segment"), "{}", stderr(&out));
    }
}
