//! `whyslow capture`: live capture to pcapng, for a duration, while a command
//! runs, or until Ctrl-C.

use crate::cmd_probe::usage;
use clap::Args;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use whyslow_check::parse_duration;
use whyslow_wire::live::LiveCapture;

/// Exit code when the capture could not start (permission, interface).
pub const EXIT_CAPTURE: u8 = 5;
/// How often the wait loop checks for Ctrl-C, the duration and the command.
const TICK: Duration = Duration::from_millis(20);

#[derive(Args)]
#[command(
    after_help = "Examples:\n  whyslow capture -i lo -p 8080 --duration 10s -w stall.pcapng\n  whyslow capture -p 8080 -w run.pcapng -- curl -s http://127.0.0.1:8080/ http://127.0.0.1:8080/"
)]
pub struct CaptureArgs {
    /// Interface (lo, eth0, any)
    #[arg(short = 'i', long, default_value = "lo")]
    pub iface: String,
    /// TCP port to capture, as source or destination (repeatable; none = all TCP)
    #[arg(short = 'p', long = "port")]
    pub ports: Vec<u16>,
    /// Stop after this long (10s, 500ms)
    #[arg(long)]
    pub duration: Option<String>,
    /// pcapng file to write (Wireshark and tshark read it)
    #[arg(short = 'w', long = "write")]
    pub file: PathBuf,
    /// Capture while this command runs: `-- COMMAND ARGS…`
    #[arg(last = true)]
    pub command: Vec<String>,
}

fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed)
}

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::Relaxed);
}

pub fn run(args: CaptureArgs) -> u8 {
    let limit = match args.duration.as_deref().map(parse_duration) {
        Some(Err(e)) => return usage(&format!("--duration: {e}")),
        Some(Ok(d)) => Some(d),
        None => None,
    };
    let handle = match LiveCapture::spawn(&args.iface, &args.ports, &args.file) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("whyslow: capture on {}: {e}", args.iface);
            return EXIT_CAPTURE;
        }
    };
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
    let start = Instant::now();
    let mut child_status = None;
    let mut child = match args.command.split_first() {
        Some((cmd, rest)) => match std::process::Command::new(cmd).args(rest).spawn() {
            Ok(c) => Some(c),
            Err(e) => {
                let _ = handle.stop();
                eprintln!("whyslow: cannot run {cmd}: {e}");
                return 127;
            }
        },
        None => None,
    };
    loop {
        if interrupted() || limit.is_some_and(|l| start.elapsed() >= l) {
            break;
        }
        if let Some(c) = child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                child_status = Some(status);
                break;
            }
        }
        if child.is_none() && limit.is_none() && args.command.is_empty() && start.elapsed() < TICK {
            eprintln!("capturing on {} until Ctrl-C …", args.iface);
        }
        std::thread::sleep(TICK);
    }
    match handle.stop() {
        Ok(s) => {
            eprintln!(
                "{} packets ({} bytes) written to {}; {} dropped by the kernel",
                s.packets,
                s.bytes,
                args.file.display(),
                s.kernel_drops
            );
            child_status
                .and_then(|s| s.code())
                .map(|c| c as u8)
                .unwrap_or(0)
        }
        Err(e) => {
            eprintln!("whyslow: capture: {e}");
            EXIT_CAPTURE
        }
    }
}
