//! Test apps on the JVM and in Go, as production runs them: built once per
//! test binary from tests/apps/jvm and tests/apps/go, their libraries taken
//! from Maven Central and the Go module proxy (pinned: the JAR's version
//! here, the Go modules' in go.sum).

use super::real::{spawn, Need, Server};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// pgJDBC, the PostgreSQL JDBC driver.
const PGJDBC: &str = "org.postgresql:postgresql:42.7.14";
/// MariaDB Connector/J.
const MARIADB_JDBC: &str = "org.mariadb.jdbc:mariadb-java-client:3.5.8";
/// The HikariCP pool and the logging API it needs.
const HIKARI: [&str; 2] = ["com.zaxxer:HikariCP:6.3.3", "org.slf4j:slf4j-api:2.0.17"];

fn apps() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps")
}

/// Where built apps and fetched libraries live, under the target directory.
fn built() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("polyglot");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// pgJDBC, HikariCP and slf4j's API, fetched by Maven once.
pub fn pgjdbc_jars() -> Vec<PathBuf> {
    static JARS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    JARS.get_or_init(|| with_hikari(PGJDBC)).clone()
}

/// MariaDB Connector/J, HikariCP and slf4j's API, fetched by Maven once.
pub fn mariadb_jdbc_jars() -> Vec<PathBuf> {
    static JARS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    JARS.get_or_init(|| with_hikari(MARIADB_JDBC)).clone()
}

fn with_hikari(driver: &str) -> Vec<PathBuf> {
    std::iter::once(driver)
        .chain(HIKARI)
        .map(maven_jar)
        .collect()
}

/// The JAR of `artifact` (group:name:version) from Maven Central, kept
/// under the target directory.
fn maven_jar(artifact: &str) -> PathBuf {
    let dir = built().join("jvm-lib");
    let mut parts = artifact.split(':').skip(1);
    let (name, version) = (parts.next().unwrap(), parts.next().unwrap());
    let jar = dir.join(format!("{name}-{version}.jar"));
    if !jar.exists() {
        run(Command::new("mvn").args([
            "-q",
            "-B",
            "dependency:copy",
            &format!("-Dartifact={artifact}"),
            &format!("-DoutputDirectory={}", dir.display()),
        ]));
    }
    jar
}

/// A single-file Java app of tests/apps/jvm, run from its source with
/// `classpath`, serving on `port`.
pub fn java_app(source: &str, classpath: &[PathBuf], port: u16, args: &[String]) -> Server {
    spawn(&mut java_command(source, classpath, args), port)
}

/// As `java_app`, recording what it served in `truth` (as apps/truth.py).
pub fn java_app_recording(
    source: &str,
    classpath: &[PathBuf],
    port: u16,
    args: &[String],
    truth: &Path,
) -> Server {
    let mut java = java_command(source, classpath, args);
    spawn(java.env("WHYSLOW_TRUTH", truth), port)
}

fn java_command(source: &str, classpath: &[PathBuf], args: &[String]) -> Command {
    let cp: Vec<String> = classpath.iter().map(|p| p.display().to_string()).collect();
    let mut java = Command::new("java");
    // The JDK's HTTP server writes headers and body apart without
    // TCP_NODELAY: Nagle × delayed ACK on every response, by default.
    java.arg("-Dsun.net.httpserver.nodelay=true")
        .args(["-cp", &cp.join(":")])
        .arg(apps().join("jvm").join(source))
        .args(args);
    java
}

/// Runs `build` for `what` once per test binary.
fn built_once(what: &str, build: impl FnOnce()) {
    static BUILT: OnceLock<std::sync::Mutex<Vec<String>>> = OnceLock::new();
    let mut done = BUILT.get_or_init(Default::default).lock().unwrap();
    if !done.iter().any(|d| d == what) {
        build();
        done.push(what.to_string());
    }
}

/// The Go app in tests/apps/go/`name`, built once per test binary (Go's
/// build cache makes a rebuild of unchanged sources quick).
pub fn go_binary(name: &str) -> PathBuf {
    let bin = built().join(name);
    built_once(&format!("go {name}"), || {
        run(Command::new("go")
            .args(["build", "-o"])
            .arg(&bin)
            .arg(".")
            .current_dir(apps().join("go").join(name)))
    });
    bin
}

/// The Rust app in tests/apps/`name` (its own Cargo workspace and lock
/// file), built once per test binary into the target directory.
pub fn rust_binary(name: &str) -> PathBuf {
    let target = built().join("cargo");
    built_once(&format!("rust {name}"), || {
        run(Command::new(env!("CARGO"))
            .args(["build", "--locked", "--manifest-path"])
            .arg(apps().join(name).join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target))
    });
    target.join("debug").join(format!("{name}-app"))
}

/// The Go app `name` (`go_binary`), serving on `port`, recording what it
/// served in `truth` (apps/truth.py's format).
pub fn go_app_recording(name: &str, port: u16, args: &[String], truth: &Path) -> Server {
    spawn(
        Command::new(go_binary(name))
            .args(args)
            .env("WHYSLOW_TRUTH", truth),
        port,
    )
}

/// The Go app `name` (`go_binary`), serving on `port`.
pub fn go_app(name: &str, port: u16, args: &[String]) -> Server {
    spawn(Command::new(go_binary(name)).args(args), port)
}

/// A JDBC app of tests/apps/jvm on its database, on HikariCP.
pub struct JdbcApp {
    pub source: &'static str,
    pub classpath: Vec<PathBuf>,
    pub db_port: u16,
    /// Calls of every page besides the items statements of its N+1.
    pub other_calls: usize,
    /// MariaDB: tshark's MySQL dissector counts the driver's commands too.
    pub mysql: bool,
}

impl JdbcApp {
    /// PgPage on pgJDBC: besides its items statements, the orders query
    /// and COMMIT (BEGIN goes out with the first).
    pub fn postgres(db_port: u16) -> JdbcApp {
        JdbcApp {
            source: "PgPage.java",
            classpath: pgjdbc_jars(),
            db_port,
            other_calls: 2,
            mysql: false,
        }
    }

    /// MyPage on MariaDB Connector/J: besides its items statements, the
    /// orders query.
    pub fn mariadb(db_port: u16) -> JdbcApp {
        JdbcApp {
            source: "MyPage.java",
            classpath: mariadb_jdbc_jars(),
            db_port,
            other_calls: 1,
            mysql: true,
        }
    }
}

/// What a JDBC test needs: tshark, a JDK, Maven, `db`, capture rights,
/// and eBPF where `ebpf`.
pub fn jdbc_needs(db: Need<'static>, ebpf: bool) -> Vec<Need<'static>> {
    let mut needs = vec![
        Need::Tool("tshark"),
        Need::Tool("java"),
        Need::Tool("mvn"),
        db,
        Need::Capture,
    ];
    needs.extend(ebpf.then_some(Need::Ebpf));
    needs
}
