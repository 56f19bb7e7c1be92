//! Runs an investigation, above the crates that measure (client, wire,
//! load, host) and the one that judges (detect): the one analysis path
//! every capture goes through (`analysis`), and diagnose's run — probes,
//! live capture, load phase — ending in it (`diagnose`). The binary only
//! turns flags into these options and renders what comes back.

pub mod analysis;
pub mod capture;
pub mod demo;
pub mod diagnose;
pub mod host;
pub mod keylog;

pub use analysis::{analyze_capture, AnalysisOptions, CaptureAnalysis, CaptureSource};

/// Completes once `flag` turns true (Ctrl-C, see the binary's
/// `interrupt_flag`); never when its sender is gone without setting it.
pub async fn interrupted(mut flag: tokio::sync::watch::Receiver<bool>) {
    if flag.wait_for(|set| *set).await.is_err() {
        std::future::pending::<()>().await;
    }
}
