//! `whyslow capture`: live capture to pcapng, for a duration, while a command
//! runs, or until Ctrl-C.

use crate::flags::commands::CaptureArgs;
use crate::flags::exit::Exit;
use crate::stdout::{usage, Done};
use std::time::{Duration, Instant};
use whyslow_check::parse_duration;
use whyslow_wire::live::LiveCapture;

/// How often the wait loop checks for Ctrl-C, the duration and the command.
const TICK: Duration = Duration::from_millis(20);

fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed)
}

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::Relaxed);
}

pub fn run(args: CaptureArgs) -> Done {
    let limit = match args.duration.as_deref().map(parse_duration) {
        Some(Err(e)) => return Ok(usage(&format!("--duration: {e}"))),
        Some(Ok(d)) => Some(d),
        None => None,
    };
    let handle = match LiveCapture::spawn(&args.iface, &args.ports, &args.file) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("whyslow: capture on {}: {e}", args.iface);
            return Ok(Exit::CaptureFailed);
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
                return Ok(Exit::CannotRun);
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
    Ok(match handle.stop() {
        Ok(s) => {
            eprintln!(
                "{} packets ({} bytes) written to {}; {} dropped by the kernel",
                s.packets,
                s.bytes,
                args.file.display(),
                s.kernel_drops
            );
            match child_status.and_then(|s| s.code()) {
                Some(c) => Exit::Child(c as u8),
                None => Exit::Ok,
            }
        }
        Err(e) => {
            eprintln!("whyslow: capture: {e}");
            Exit::CaptureFailed
        }
    })
}
