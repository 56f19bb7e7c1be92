//! Real servers from Debian packages on loopback, for the tests that hold
//! whyslow to real software: redis-server, memcached, PostgreSQL, nghttpd.
//! Each starts on a free port and stops (SIGTERM) when dropped.

use super::{capture_allowed, free_port, have, needed, tmpdir, wait_listening};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// Debian's Python, where scripts/test.sh installs the client libraries the
/// test apps use (python3-redis, python3-psycopg2, python3-pymemcache); a
/// python3 earlier on PATH (pyenv, a venv) may not have them.
pub fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// A running server; SIGTERM and wait on drop.
pub struct Server {
    child: Child,
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `child`, once something listens on `port`; stopped if nothing ever does.
    pub fn started(child: Child, port: u16) -> Server {
        let s = Server { child, port };
        wait_listening(port);
        s
    }
}

/// `cmd` started with its output dropped, once something listens on `port`.
pub fn spawn(cmd: &mut Command, port: u16) -> Server {
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
    Server::started(child, port)
}

/// A test app in tests/apps run by Debian's Python, serving on `port`.
pub fn python_app(script: &str, port: u16, args: &[String]) -> Server {
    spawn(&mut python_command(script, args), port)
}

/// `python_app`, recording each request's calls in `truth` (apps/truth.py).
pub fn python_app_recording(script: &str, port: u16, args: &[String], truth: &Path) -> Server {
    spawn(
        python_command(script, args).env("WHYSLOW_TRUTH", truth),
        port,
    )
}

fn python_command(script: &str, args: &[String]) -> Command {
    python_command_of(Path::new(python()), script, args)
}

/// `script` of tests/apps run by `python` with `args`.
pub fn python_command_of(python: &Path, script: &str, args: &[String]) -> Command {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/apps")
        .join(script);
    let mut cmd = Command::new(python);
    cmd.arg(path).args(args);
    cmd
}

/// The virtual environment scripts/test.sh makes over Debian's Python for
/// the test apps' packages from PyPI (OpenTelemetry), which Debian lacks.
pub fn pypi_python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pyenv/bin/python")
}

/// Whether `pypi_python` has `module`, as `needed` says.
pub fn pypi_python_has(test: &str, module: &str) -> bool {
    let ok = Command::new(pypi_python())
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    needed(test, &format!("python module {module} in target/pyenv"), ok)
}

/// `python_app_recording` run by `pypi_python`.
pub fn pypi_app_recording(script: &str, port: u16, args: &[String], truth: &Path) -> Server {
    spawn(
        python_command_of(&pypi_python(), script, args).env("WHYSLOW_TRUTH", truth),
        port,
    )
}

/// `pypi_app_recording` with OpenTelemetry on (apps/otel_export.py): the
/// app is `service`, its spans go to `sink` — a file, or an OTLP/HTTP
/// endpoint when it starts with "http://".
pub fn pypi_app_tracing(
    script: &str,
    port: u16,
    args: &[String],
    truth: &Path,
    (service, sink): (&str, &str),
) -> Server {
    let mut cmd = python_command_of(&pypi_python(), script, args);
    cmd.env("WHYSLOW_TRUTH", truth)
        .env("WHYSLOW_OTEL_SERVICE", service);
    if sink.starts_with("http://") || sink.starts_with("grpc://") {
        cmd.env("WHYSLOW_OTLP_ENDPOINT", sink);
    } else {
        cmd.env("WHYSLOW_OTLP_FILE", sink);
    }
    spawn(&mut cmd, port)
}

/// apps/stall_app.py: a tax service that stalls `stall_ms` once in `every`
/// calls, and the `variant` checkout in front of it (recording its calls in
/// `truth` when given). Returns (tax, checkout).
pub fn stall_apps(
    variant: &str,
    every: u64,
    stall_ms: u64,
    truth: Option<&Path>,
) -> (Server, Server) {
    let tax_port = free_port();
    let args = [
        "tax".into(),
        tax_port.to_string(),
        every.to_string(),
        stall_ms.to_string(),
    ];
    let tax = python_app("stall_app.py", tax_port, &args);
    let port = free_port();
    let args = [
        "checkout".into(),
        port.to_string(),
        tax_port.to_string(),
        variant.into(),
    ];
    let checkout = match truth {
        Some(t) => python_app_recording("stall_app.py", port, &args, t),
        None => python_app("stall_app.py", port, &args),
    };
    (tax, checkout)
}

/// A test app in tests/apps run to its end by Debian's Python; its output.
pub fn python_run(script: &str, args: &[String]) -> std::process::Output {
    python_command(script, args)
        .output()
        .unwrap_or_else(|e| panic!("run {script}: {e}"))
}

/// Whether Debian's Python has `module`; under WHYSLOW_REQUIRE_CAPTURE=1
/// (CI, where scripts/test.sh installs it) a missing module is a failure.
pub fn python_has(test: &str, module: &str) -> bool {
    let ok = Command::new(python())
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    needed(test, &format!("python module {module}"), ok)
}

/// tcpdump writing `file` from lo for `ports` while `run` runs; stopped
/// after it. Returns how many packets tcpdump says the kernel dropped.
pub fn tcpdump_while(file: &Path, ports: &[u16], run: impl FnOnce()) -> u64 {
    let filter: Vec<String> = ports.iter().map(|p| format!("tcp port {p}")).collect();
    tcpdump_in(Command::new("tcpdump"), file, &filter.join(" or "), run)
}

/// As `tcpdump_while`, `tcpdump` being `command` (in a network namespace)
/// and `filter` its filter expression.
pub fn tcpdump_in(tcpdump: Command, file: &Path, filter: &str, run: impl FnOnce()) -> u64 {
    tcpdump_on(tcpdump, "lo", file, filter, run)
}

/// As `tcpdump_in`, on interface `iface`.
pub fn tcpdump_on(
    mut tcpdump: Command,
    iface: &str,
    file: &Path,
    filter: &str,
    run: impl FnOnce(),
) -> u64 {
    use std::io::BufRead;
    let mut child = tcpdump
        // -B: a 256 MiB kernel buffer, or bursts of large values (16 MiB
        // cache writes) overflow the default 2 MiB and packets are dropped;
        // its slots are sized by lo's 64 KiB MTU, so 64 MiB held ~1000.
        .args([
            "-i",
            iface,
            "-U",
            "--immediate-mode",
            "-B",
            "262144",
            "-n",
            "-w",
        ])
        .arg(file)
        .arg(filter)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump");
    // tcpdump says "listening on IFACE" once its socket is bound; immediate
    // mode hands each packet over at once instead of in timed blocks.
    // (On `any` it first names the link type it chose.)
    let mut line = String::new();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    for _ in 0..3 {
        line.clear();
        let _ = err.read_line(&mut line);
        if line.contains("listening") || line.is_empty() {
            break;
        }
    }
    assert!(line.contains("listening"), "tcpdump: {line}");
    run();
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    // On exit it prints "N packets dropped by kernel".
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut err, &mut rest);
    let _ = child.wait();
    rest.lines()
        .find_map(|l| l.strip_suffix(" packets dropped by kernel"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// `n` GETs of `url` with curl, one after another, each a new connection.
pub fn curl_each(url: &str, n: usize) {
    for _ in 0..n {
        let ok = Command::new("curl")
            .args(["-sf", "-o", "/dev/null", url])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "curl {url}");
    }
}

pub fn redis() -> Server {
    let port = free_port();
    let p = port.to_string();
    spawn(
        Command::new("redis-server").args([
            "--port",
            &p,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]),
        port,
    )
}

pub fn memcached() -> Server {
    let port = free_port();
    let p = port.to_string();
    // -u: memcached refuses to run as root without a user to become.
    // -I/-m: items up to 32 MiB (case 004's 16 MB values; at most half the memory).
    spawn(
        Command::new("memcached").args([
            "-l",
            "127.0.0.1",
            "-p",
            &p,
            "-U",
            "0",
            "-u",
            "nobody",
            "-I",
            "32m",
            "-m",
            "128",
        ]),
        port,
    )
}

/// nghttpd serving `dir` over cleartext HTTP/2 (prior knowledge and h2c upgrade).
pub fn nghttpd(dir: &Path) -> Server {
    let port = free_port();
    let p = port.to_string();
    spawn(
        Command::new("nghttpd").args(["--no-tls", "-d", dir.to_str().unwrap(), &p]),
        port,
    )
}

/// PostgreSQL's server programs (Debian keeps them out of PATH).
fn pg_bin(name: &str) -> PathBuf {
    for v in ["17", "16", "15"] {
        let p = PathBuf::from(format!("/usr/lib/postgresql/{v}/bin/{name}"));
        if p.exists() {
            return p;
        }
    }
    PathBuf::from(name)
}

pub fn have_postgres() -> bool {
    pg_bin("initdb").exists() && have("psql")
}

/// PostgreSQL for `test`, as `needed` says.
pub fn postgres_needed(test: &str) -> bool {
    needed(test, "PostgreSQL (initdb, psql)", have_postgres())
}

/// What a test needs of the machine.
#[derive(Debug, Clone, Copy)]
pub enum Need<'a> {
    /// A program on PATH.
    Tool(&'a str),
    /// A module of Debian's Python (`python_has`).
    Python(&'a str),
    /// PostgreSQL's server programs and psql (`postgres_needed`).
    Postgres,
    /// MariaDB's server programs (`mariadb_needed`).
    Mariadb,
    /// Raw packet sockets (`capture_allowed`).
    Capture,
    /// Loading eBPF programs (`ebpf_allowed`).
    Ebpf,
}

/// Whether `test` has everything it needs, checked in the order given: at
/// the first that is missing, a skip with the reason printed on a user's
/// machine, a failure in CI (WHYSLOW_REQUIRE_CAPTURE=1), as `needed` says.
pub fn requirements_met(test: &str, needs: &[Need]) -> bool {
    needs.iter().all(|need| match *need {
        Need::Tool(tool) => needed(test, tool, have(tool)),
        Need::Python(module) => python_has(test, module),
        Need::Postgres => postgres_needed(test),
        Need::Mariadb => mariadb_needed(test),
        Need::Capture => capture_allowed(test),
        Need::Ebpf => ebpf_allowed(test),
    })
}

/// Whether eBPF programs may be loaded here: root and a kernel with BTF.
/// When not, eBPF tests skip with the reason, except under
/// WHYSLOW_REQUIRE_EBPF=1 (CI), where they fail.
pub fn ebpf_allowed(test: &str) -> bool {
    // SAFETY: geteuid(2) has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let btf = Path::new("/sys/kernel/btf/vmlinux").exists();
    if root && btf {
        return true;
    }
    let why = if root {
        "a kernel with BTF"
    } else {
        "root (CAP_BPF and CAP_PERFMON)"
    };
    if std::env::var("WHYSLOW_REQUIRE_EBPF").as_deref() == Ok("1") {
        panic!("{test}: eBPF needs {why} and WHYSLOW_REQUIRE_EBPF=1");
    }
    eprintln!("skipping {test}: eBPF needs {why}");
    false
}

/// Runs `cmd` as the `postgres` user when we are root (the server refuses root).
pub fn as_pg_user(program: &Path) -> Command {
    // SAFETY: getuid(2) has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// A self-signed certificate and its key in `dir` (cert.pem, key.pem), made by openssl.
pub fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let ok = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=localhost"])
        // Clients that check the name (requests) call 127.0.0.1.
        .args([
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "openssl req");
    (cert, key)
}

/// redis-server serving only TLS (`--tls-port`), clients not authenticated.
pub fn redis_tls(dir: &Path) -> Server {
    let (cert, key) = self_signed(dir);
    let port = free_port();
    let p = port.to_string();
    spawn(
        Command::new("redis-server")
            .args(["--port", "0", "--tls-port", &p, "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--tls-auth-clients",
                "no",
            ])
            .arg("--tls-cert-file")
            .arg(&cert)
            .arg("--tls-key-file")
            .arg(&key)
            .arg("--tls-ca-cert-file")
            .arg(&cert),
        port,
    )
}

/// A new cluster in `dir` (trust auth, no fsync), owned by postgres when
/// run as root; its data directory.
pub fn pg_cluster(dir: &Path) -> PathBuf {
    // SAFETY: getuid(2) has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        let ok = Command::new("chown")
            .args(["-R", "postgres:postgres", dir.to_str().unwrap()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "chown the cluster directory to postgres");
    }
    let data = dir.join("data");
    let out = as_pg_user(&pg_bin("initdb"))
        .args([
            "-D",
            data.to_str().unwrap(),
            "--auth=trust",
            "-U",
            "postgres",
            "--no-sync",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "initdb: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    data
}

/// The server of the cluster in `dir` (`pg_cluster`), listening on
/// `addr`:`port`, its socket in `dir`; `wrap` makes the command that runs
/// a program as postgres (in a namespace, say).
pub fn pg_server(wrap: impl Fn(&Path) -> Command, dir: &Path, addr: &str, port: u16) -> Command {
    let mut cmd = wrap(&pg_bin("postgres"));
    cmd.args(["-D", dir.join("data").to_str().unwrap()])
        .args(["-p", &port.to_string(), "-k", dir.to_str().unwrap()])
        .args(["-c", &format!("listen_addresses={addr}"), "-c", "fsync=off"]);
    cmd
}

/// A throwaway cluster (trust auth, no fsync) on a free loopback port.
pub fn postgres() -> (Server, PathBuf) {
    postgres_with(false)
}

/// As `postgres`; `ssl`: TLS on (`ssl=on`) with a self-signed certificate.
pub fn postgres_with(ssl: bool) -> (Server, PathBuf) {
    let dir = tmpdir("pg");
    let mut settings = Vec::new();
    if ssl {
        let (cert, key) = self_signed(&dir);
        use std::os::unix::fs::PermissionsExt;
        // The server refuses a key others can read.
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        settings.extend([
            "ssl=on".to_string(),
            format!("ssl_cert_file={}", cert.display()),
            format!("ssl_key_file={}", key.display()),
        ]);
    }
    pg_cluster(&dir);
    let port = free_port();
    let mut cmd = pg_server(as_pg_user, &dir, "127.0.0.1", port);
    let server = spawn(
        cmd.args(settings.iter().flat_map(|s| ["-c", s.as_str()])),
        port,
    );
    // Accepting TCP is not accepting queries yet: wait for a query to pass.
    for _ in 0..100 {
        if psql(port, &["-c", "SELECT 1"]).status.success() {
            return (server, dir);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("postgres on {port} never answered");
}

pub fn psql(port: u16, args: &[&str]) -> std::process::Output {
    Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "postgres",
            "-X",
            "-q",
        ])
        .args(args)
        .env("PGCONNECT_TIMEOUT", "5")
        .output()
        .unwrap()
}

/// Values of tshark `-T fields` output, one per field occurrence (tshark
/// joins several occurrences in one frame with commas).
pub fn tshark_fields(file: &Path, decode_as: &str, filter: &str, field: &str) -> Vec<String> {
    tshark_fields_decrypted(file, None, decode_as, filter, field)
}

/// As `tshark_fields`, decrypting TLS with the key log `keys` when given.
pub fn tshark_fields_decrypted(
    file: &Path,
    keys: Option<&Path>,
    decode_as: &str,
    filter: &str,
    field: &str,
) -> Vec<String> {
    let mut tshark = Command::new("tshark");
    tshark.args(["-r", file.to_str().unwrap()]);
    if let Some(keys) = keys {
        tshark.args(["-o", &format!("tls.keylog_file:{}", keys.display())]);
    }
    let out = tshark
        .args(["-d", decode_as, "-Y", filter])
        .args([
            "-T",
            "fields",
            "-E",
            "occurrence=a",
            "-E",
            "aggregator=|",
            "-e",
            field,
        ])
        .output()
        .expect("run tshark");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .flat_map(|l| l.split('|').map(str::to_string).collect::<Vec<_>>())
        .filter(|v| !v.is_empty())
        .collect()
}

/// nginx serving HTTPS on `port` with a fresh self-signed ECDSA certificate;
/// `listen` adds `http2` to offer HTTP/2 by ALPN. `/gone` answers 404.
pub fn nginx_tls(dir: &Path, port: u16, listen: &str) -> Server {
    let d = dir.display();
    self_signed(dir);
    let conf = format!(
        "worker_processes 1; daemon off; error_log {d}/error.log; pid {d}/nginx.pid;
events {{ worker_connections 64; }}
http {{ access_log off;
  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};
  uwsgi_temp_path {d}; scgi_temp_path {d};
  server {{ listen 127.0.0.1:{port} {listen};
    ssl_certificate {d}/cert.pem; ssl_certificate_key {d}/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305;
    location / {{ return 200 \"ok\\n\"; }}
    location /gone {{ return 404; }} }} }}\n"
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let child = Command::new("nginx")
        .args(["-e", &format!("{d}/error.log"), "-c"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx");
    Server::started(child, port)
}

/// `diagnose --ebpf --json --timeline` of case 003's ORM app at `url`, with
/// a load phase of 16 connections. One checkout every 8 ms, under the
/// ~13 ms one takes: requests overlap (arrivals are evenly spaced; at 40/s
/// they need not).
pub fn diagnose_checkouts(url: &str) -> serde_json::Value {
    diagnose_checkouts_saved(url, None)
}

/// As `diagnose_checkouts`, keeping the capture in `save` if given.
pub fn diagnose_checkouts_saved(url: &str, save: Option<&Path>) -> serde_json::Value {
    let mut args = vec![
        "diagnose",
        "--ebpf",
        "--json",
        "--timeline",
        "-n",
        "2",
        "-c",
        "16",
        "--rate",
        "120",
        "--duration",
        "2s",
    ];
    if let Some(file) = save {
        args.extend(["-w", file.to_str().unwrap()]);
    }
    args.push(url);
    let out = super::whyslow(&args);
    assert!(out.status.success(), "{}", super::stderr(&out));
    super::json(&out)
}

/// The report names the ORM app's N+1: the lazy items query, `orders`
/// times per checkout.
pub fn assert_items_n_plus_one(report: &serde_json::Value, orders: u64) {
    let kinds = super::causes(report);
    let n1 = super::finding(report, "n_plus_one").unwrap_or_else(|| panic!("{kinds:?}"));
    let summary = n1["summary"].as_str().unwrap();
    assert!(
        summary.contains("FROM items") && summary.contains(&format!("ran {orders} times")),
        "{summary}"
    );
}

/// Whether MariaDB's server programs are here, as `needed` says.
pub fn mariadb_needed(test: &str) -> bool {
    let ok = have("mariadbd") || Path::new("/usr/sbin/mariadbd").exists();
    needed(test, "MariaDB (mariadbd, mariadb-install-db)", ok)
}

/// A MariaDB server from Debian's packages on a throwaway data directory,
/// on 127.0.0.1 and a free port, with a database `shop` and users `app`
/// (password `app`) and `lab` (none) who may do anything in it. Stops when
/// dropped.
pub fn mariadb() -> Server {
    mariadb_with(None)
}

/// As `mariadb`; with `tls`, in DIR: TLS offered with a self-signed
/// certificate made there (clients ask for it with MySQL's SSL request).
pub fn mariadb_with(tls: Option<&Path>) -> Server {
    let dir = tmpdir("mariadb");
    let data = dir.join("data");
    let sock = dir.join("sock");
    let out = Command::new("mariadb-install-db")
        .args(["--no-defaults", "--auth-root-authentication-method=socket"])
        .arg(format!("--datadir={}", data.display()))
        .args(["--user=root", "--skip-test-db", "--skip-name-resolve"])
        .output()
        .expect("mariadb-install-db");
    assert!(
        out.status.success(),
        "mariadb-install-db: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let port = free_port();
    let mariadbd = if have("mariadbd") {
        "mariadbd".into()
    } else {
        PathBuf::from("/usr/sbin/mariadbd")
    };
    let server = spawn(
        Command::new(mariadbd)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", sock.display()))
            .arg(format!("--pid-file={}", dir.join("pid").display()))
            .args([
                "--user=root",
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
            ])
            .args(["--innodb-flush-log-at-trx-commit=0", "--skip-log-bin"])
            .arg(format!("--port={port}"))
            .args(tls.map(self_signed).map_or(Vec::new(), |(cert, key)| {
                vec![
                    format!("--ssl-cert={}", cert.display()),
                    format!("--ssl-key={}", key.display()),
                ]
            }))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        port,
    );
    // `app` for the test apps; `lab` (no password) for the lab's own client.
    let setup = "CREATE DATABASE shop; CREATE USER 'app'@'%' IDENTIFIED BY 'app'; \
                 GRANT ALL ON shop.* TO 'app'@'%'; CREATE USER 'lab'@'%'; \
                 GRANT ALL ON shop.* TO 'lab'@'%';";
    for _ in 0..100 {
        if mariadb_root(&sock, setup) {
            return server;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("mariadb on {port} never answered");
}

/// Runs `sql` as MariaDB's root over the server's socket; whether it passed.
fn mariadb_root(sock: &Path, sql: &str) -> bool {
    Command::new("mariadb")
        .arg(format!("--socket={}", sock.display()))
        .args(["-u", "root", "-e", sql])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `script` of tests/apps run to its end by `pypi_python`.
pub fn pypi_python_run(script: &str, args: &[String]) -> std::process::Output {
    python_command_of(&pypi_python(), script, args)
        .output()
        .unwrap_or_else(|e| panic!("run {script}: {e}"))
}

/// `whyslow capture --ebpf --pid PID` on `ports` into `file` while
/// `whyslow load LOAD…` runs: the socket calls of the app beside its packets.
pub fn ebpf_captured_under_load(pid: u32, ports: &[u16], file: &Path, load: &[&str]) -> Output {
    captured_with(&["--ebpf", "--pid", &pid.to_string()], ports, file, load)
}

/// `whyslow capture` on `ports` into `file` while `whyslow load LOAD…`
/// runs: packets alone.
pub fn captured_under_load(ports: &[u16], file: &Path, load: &[&str]) -> Output {
    captured_with(&[], ports, file, load)
}

fn captured_with(options: &[&str], ports: &[u16], file: &Path, load: &[&str]) -> Output {
    let mut args = vec!["capture".to_string()];
    args.extend(options.iter().map(|o| o.to_string()));
    for p in ports {
        args.extend(["-p".to_string(), p.to_string()]);
    }
    args.extend(["-w".to_string(), file.display().to_string(), "--".into()]);
    args.extend([env!("CARGO_BIN_EXE_whyslow").to_string(), "load".into()]);
    args.extend(load.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    super::whyslow(&args)
}

/// The grpc-status values tshark reads in the header blocks `port` sent,
/// decoded as `decode_as` (decrypted with `keys` if given): each frame's
/// header names zipped with their values.
pub fn tshark_grpc_statuses(
    file: &Path,
    keys: Option<&Path>,
    decode_as: &str,
    port: u16,
) -> Vec<String> {
    let mut tshark = Command::new("tshark");
    tshark.args(["-r", file.to_str().unwrap()]);
    if let Some(keys) = keys {
        tshark.args(["-o", &format!("tls.keylog_file:{}", keys.display())]);
    }
    let filter = format!("tcp.srcport=={port} && http2.header.name==\"grpc-status\"");
    let out = tshark
        .args(["-d", decode_as, "-Y", &filter])
        .args(["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|"])
        .args(["-e", "http2.header.name", "-e", "http2.header.value"])
        .output()
        .expect("run tshark");
    assert!(out.status.success());
    let mut statuses = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((names, values)) = line.split_once('\t') else {
            continue;
        };
        for (n, v) in names.split('|').zip(values.split('|')) {
            if n == "grpc-status" {
                statuses.push(v.to_string());
            }
        }
    }
    statuses
}

/// `named` (a report's causes) for a gRPC front's calls on one connection:
/// with a stream limit (`Some(streams)`), stream_queueing first with that
/// limit; without, no queueing named at all.
pub fn stream_limit_held(
    case: &str,
    report: &serde_json::Value,
    named: &[String],
    limit: Option<u64>,
) {
    match limit {
        None => {
            let kinds = ["stream_queueing", "pool_queueing"];
            assert!(
                !named.iter().any(|k| kinds.contains(&k.as_str())),
                "{case}: {named:?}"
            );
        }
        Some(streams) => {
            assert_eq!(
                named.first().map(String::as_str),
                Some("stream_queueing"),
                "{case}: {named:?}"
            );
            let f = super::finding(report, "stream_queueing").unwrap();
            assert_eq!(f["facts"]["streams"], streams as f64, "{case}: {f}");
        }
    }
}
