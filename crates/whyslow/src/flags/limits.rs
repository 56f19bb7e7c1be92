//! Memory bounds of a capture's analysis (`--max-events` and the rest):
//! analyze and diagnose.

use super::keylog::KeyLogIn;
use clap::Args;
use whyslow_investigate::AnalysisOptions;
use whyslow_wire::{Bounds, FlowOptions, WindowPolicy};

#[derive(Args, Clone, Debug)]
pub struct LimitArgs {
    /// Per-connection segment/ACK events kept (memory bound)
    #[arg(long, default_value_t = Bounds::default().max_events_per_connection)]
    pub max_events: usize,
    /// Segment/ACK events kept over all connections (memory bound)
    #[arg(long, default_value_t = Bounds::default().max_events_total)]
    pub max_events_total: usize,
    /// Connections tracked at once (memory bound)
    #[arg(long, default_value_t = Bounds::default().max_flows)]
    pub max_flows: usize,
    /// Exchanges kept as evidence (--timeline, --html); analyze counts and
    /// analyzes them all (memory bound)
    #[arg(long, default_value_t = Bounds::default().max_exchanges)]
    pub max_exchanges: usize,
    /// Connections kept as evidence, first opened first; analyze counts and
    /// analyzes them all (memory bound)
    #[arg(long, default_value_t = Bounds::default().max_connections)]
    pub max_connections: usize,
    /// analyze: finished exchanges per analysis window, at most (memory
    /// bound; a request and the calls made for it always share a window).
    /// Windows are cut at 5 000 already without a service, or once they
    /// hold the service's requests a stall period needs
    #[arg(long, default_value_t = WindowPolicy::default().exchanges)]
    pub window: usize,
}

impl LimitArgs {
    /// The flow table's options, with the key log read now (a capture
    /// file's keys exist already).
    pub fn with_keylog(&self, keylog: &KeyLogIn) -> Result<FlowOptions, String> {
        Ok(FlowOptions {
            keylog: keylog.read()?,
            ..self.bounds()
        })
    }

    /// The bounds and window policy alone: `diagnose` reads the service's
    /// key log after the run, once the service has written the keys of the
    /// connections it made.
    pub fn bounds(&self) -> FlowOptions {
        let defaults = AnalysisOptions::default_flow();
        FlowOptions {
            bounds: Bounds {
                max_events_per_connection: self.max_events,
                max_events_total: self.max_events_total,
                max_flows: self.max_flows,
                max_exchanges: self.max_exchanges,
                max_connections: self.max_connections,
                ..Bounds::default()
            },
            window: WindowPolicy {
                exchanges: self.window.max(1),
                ..defaults.window
            },
            ..defaults
        }
    }
}
