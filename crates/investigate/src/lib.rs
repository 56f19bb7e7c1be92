//! Runs an investigation, above the crates that measure (client, wire,
//! load, host) and the one that judges (detect): the one analysis path
//! every capture goes through (`analysis`), and diagnose's run — probes,
//! live capture, load phase — ending in it (`diagnose`). The binary only
//! turns flags into these options and renders what comes back.

pub mod analysis;
pub mod capture;
pub mod demo;
pub mod diagnose;
mod events;
pub mod host;
mod joined;
pub mod keylog;
pub mod load;
pub mod probe;
pub mod receive;
pub mod receive_grpc;
pub mod record;
pub mod send;
pub mod spans;
pub mod target;

pub use analysis::{analyze_capture, AnalysisOptions, CaptureAnalysis, CaptureSource};
pub use joined::analyze_hosts;
pub use spans::analyze_spans;
pub use whyslow_detect::windowed::Scope;

/// Completes once `flag` turns true (Ctrl-C, see the binary's
/// `interrupt_flag`); never when its sender is gone without setting it.
pub async fn interrupted(mut flag: tokio::sync::watch::Receiver<bool>) {
    if flag.wait_for(|set| *set).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Completes on Ctrl-C (SIGINT). Commands race it against their work so that
/// what was measured before the interrupt is still reported.
pub async fn ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A flag that turns true on Ctrl-C, for runs of several steps that must
/// stop between (or inside) them. Call inside a runtime.
pub fn interrupt_flag() -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        ctrl_c().await;
        let _ = tx.send(true);
    });
    rx
}

/// A runtime for one command. Probes use a single thread so that timings
/// are not disturbed by work stealing.
pub fn runtime(threads: usize) -> tokio::runtime::Runtime {
    let mut b = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    b.enable_all().build().expect("tokio runtime")
}
