//! `whyslow load`: constant-rate (open model) or as-fast-as-possible (closed
//! model) load that tells the truth about latency.
//!
//! - `schedule`: when each request is meant to start (constant, ramp, steps).
//! - `engine`: lanes that keep the schedule, and the interval collector.
//! - `histograms`: the client's failures as error classes; the HDR recording
//!   itself (`Recorded`, `Metric`) is `whyslow_model::load_record`'s, where
//!   reports and `compare` read it without the engine.
//! - `result`: building the result file from a run, and its merge; reading
//!   one back is `whyslow_model::LoadResult`'s. `hdrlog`: HdrHistogram interval logs.
//! - `saturation`: the `generator_saturated` finding; `omission`: the
//!   `coordinated_omission` finding; `findmax`: the SLO search and its steps' verdicts.
//! - `plan`: schedules from their text, run length, threads, the setup a result records.

pub mod engine;
pub mod findmax;
pub mod hdrlog;
pub mod histograms;
pub mod omission;
pub mod plan;
pub mod result;
pub mod saturation;
pub mod schedule;
pub mod segment;
mod timer;

pub use engine::{run, Interval, LoadPlan, Outcome, Stop, INTERRUPT_GRACE};
pub use histograms::Metric;
pub use plan::run_setup;
pub use result::{merge, LoadResult, LoadResultExt, Percentiles, RunSetup};
pub use schedule::{Model, Schedule};
