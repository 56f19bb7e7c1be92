//! deploy/kubernetes: the manifests pass the Kubernetes schemas offline
//! (kubernetes-validate, its schemas vendored in the package), ask for no
//! more than the agent needs, and their whyslow commands run as written.

mod common;

use common::real::{pypi_python, pypi_python_has};
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Kubernetes version the manifests are held to.
const KUBERNETES: &str = "1.31.0";

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes")
}

fn manifests() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn validate(files: &[PathBuf]) -> std::process::Output {
    let validator = pypi_python().with_file_name("kubernetes-validate");
    Command::new(validator)
        .args(["--strict", "-k", KUBERNETES])
        .args(files)
        .output()
        .unwrap()
}

/// Every document of a YAML file, as JSON.
fn documents(file: &Path) -> Vec<Value> {
    let out = Command::new(pypi_python())
        .args([
            "-c",
            "import sys, yaml, json; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
        ])
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn one_of_kind(file: &str, kind: &str) -> Value {
    documents(&deploy_dir().join(file))
        .into_iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {file}"))
}

fn container_args(workload: &Value) -> Vec<String> {
    workload["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_manifests_pass_the_kubernetes_schemas_offline() {
    if !pypi_python_has("deploy", "kubernetes_validate") {
        return;
    }
    let files = manifests();
    for want in [
        "agent-daemonset",
        "collector",
        "capture-job",
        "load-indexed-job",
    ] {
        assert!(
            files.iter().any(|f| f.file_stem().unwrap() == want),
            "{want}.yaml"
        );
    }
    let out = validate(&files);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    // The validator rejects what Kubernetes would: a misspelled field.
    let dir = tmpdir("deploy");
    let broken = dir.join("broken.yaml");
    let text = std::fs::read_to_string(deploy_dir().join("agent-daemonset.yaml")).unwrap();
    std::fs::write(&broken, text.replace("hostPID: true", "hostPid: true")).unwrap();
    assert!(!validate(&[broken]).status.success());
}

#[test]
fn the_agent_daemonset_asks_for_what_it_needs_only() {
    if !pypi_python_has("deploy", "yaml") {
        return;
    }
    let ds = one_of_kind("agent-daemonset.yaml", "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true);
    let security = &pod["containers"][0]["securityContext"];
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    let mut caps: Vec<&str> = security["capabilities"]["add"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    caps.sort_unstable();
    assert_eq!(
        caps,
        [
            "BPF",
            "DAC_READ_SEARCH",
            "NET_ADMIN",
            "NET_RAW",
            "PERFMON",
            "SYS_ADMIN",
            "SYS_PTRACE"
        ]
    );
    assert_ne!(security["privileged"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    for mount in pod["containers"][0]["volumeMounts"].as_array().unwrap() {
        let path = mount["mountPath"].as_str().unwrap();
        if path.starts_with("/sys") || path.starts_with("/proc") || path.starts_with("/host") {
            assert_eq!(mount["readOnly"], true, "{path}");
        }
    }
}

#[test]
fn the_agent_runs_with_the_daemonsets_flags() {
    if !pypi_python_has("deploy", "yaml") || !capture_allowed("deploy") {
        return;
    }
    let _g = serial();
    let ds = one_of_kind("agent-daemonset.yaml", "DaemonSet");
    let dir = tmpdir("deploy-agent");
    let refused = free_port();
    // As written, but one short window, on this host, and nothing to send to.
    let args: Vec<String> = container_args(&ds)
        .into_iter()
        .map(|a| match a.split_once('=') {
            Some(("--window", _)) => "--window=1s".into(),
            Some(("--host-root", _)) => "--host-root=/".into(),
            Some(("--dir", _)) => format!("--dir={}", dir.display()),
            Some(("--otlp-endpoint", _)) => format!("--otlp-endpoint=http://127.0.0.1:{refused}"),
            _ => a,
        })
        .chain(["--windows=1".to_string()])
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = whyslow(&args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    let window: Value = serde_json::from_str(stdout(&out).lines().next().unwrap()).unwrap();
    assert_eq!(window["workloads"][0]["label"], "host");
    assert!(window["export"].is_object(), "{window}");
}

#[test]
fn the_indexed_load_job_run_as_four_processes_merges_into_one_run() {
    if !pypi_python_has("deploy", "yaml") {
        return;
    }
    let _g = serial();
    let job = one_of_kind("load-indexed-job.yaml", "Job");
    assert_eq!(job["spec"]["completionMode"], "Indexed");
    let count = job["spec"]["completions"].as_u64().unwrap();
    assert_eq!(job["spec"]["parallelism"].as_u64(), Some(count));
    let addr = app(whyslow_lab::http1::AppConfig {
        work: common::segments::WORK,
        ..Default::default()
    });
    let url = format!("http://{addr}/");
    let dir = tmpdir("deploy-load");
    // As the kubelet runs it: $(JOB_COMPLETION_INDEX) expanded, the index in
    // the environment; the rate, length and target made this test's.
    let args_of = |index: u64| -> Vec<String> {
        container_args(&job)
            .into_iter()
            .map(|a| {
                let a = a.replace("$(JOB_COMPLETION_INDEX)", &index.to_string());
                match a.split_once('=') {
                    Some(("--rate", _)) => "--rate=100".into(),
                    Some(("--duration", _)) => "--duration=4s".into(),
                    Some(("--connections", _)) => "--connections=8".into(),
                    Some(("--output", p)) => {
                        let name = Path::new(p).file_name().unwrap().to_str().unwrap();
                        format!("--output={}", dir.join(name).display())
                    }
                    _ if a.starts_with("http") => url.clone(),
                    _ => a,
                }
            })
            .collect()
    };
    let children: Vec<_> = (0..count)
        .map(|i| {
            Command::new(env!("CARGO_BIN_EXE_whyslow"))
                .args(args_of(i))
                .env("JOB_COMPLETION_INDEX", i.to_string())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let parts: Vec<PathBuf> = (0..count)
        .map(|i| dir.join(format!("part-{i}.json")))
        .collect();
    let single = dir.join("single.json");
    let args = common::segments::load_args(&url, &single);
    let out = whyslow(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", stderr(&out));
    common::segments::same_run(&single, &parts);
}
