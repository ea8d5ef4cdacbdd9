//! Benchmarks and testbed experiments. Each takes a plain config struct and returns its rows
//! or report; progress goes through [`Hooks`]. Nothing here parses arguments or prints
//! results: the `mgrp` CLI does, and tests call the same functions.

pub mod accuracy;
#[cfg(test)]
mod auto_study;
pub mod bottleneck_bench;
pub mod capacity_bench;
pub mod dashboard_run;
pub mod inline_bench;
pub mod live_estimate;
pub mod loss_bench;
pub mod loss_truth;
pub mod map_bench;
pub mod medianet_bench;
pub mod modes_bench;
pub mod mpat_bench;
pub mod pacing_bench;
pub mod passive_bench;
#[cfg(test)]
mod phase_study;
pub mod proxy_bench;
pub mod riders_bench;
pub mod rig;
pub mod tcp_avail_bench;
pub mod testbed_bench;
pub mod testbed_run;
pub mod topo_run;
pub mod tracking_bench;
pub mod wren2_bench;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Testbed(#[from] mgrp_testbed::Error),
    #[error(transparent)]
    Engine(#[from] mgrp_engine::Error),
    #[error(transparent)]
    Capture(#[from] mgrp_capture::Error),
    #[error(transparent)]
    Service(#[from] mgrp_service::Error),
    #[error(transparent)]
    Method(#[from] mgrp_estimate::methods::MethodError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A configuration the experiment cannot run, and why.
    #[error("{0}")]
    Config(String),
    /// A congestion control that is not available where a flow was to use it, and why.
    #[error("{0}")]
    Unavailable(String),
    /// A worker thread failed, ended or did not answer.
    #[error("{0}")]
    Worker(String),
    #[error("interrupted")]
    Interrupted,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Fail with [`Error::Config`] unless `ok`.
pub(crate) fn ensure(ok: bool, why: &str) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::Config(why.to_string()))
    }
}

/// How an experiment talks to whoever runs it: status text for people (progress lines, with
/// their own `\r`/`\n`), and whether to stop early (Ctrl-C).
#[derive(Clone, Copy)]
pub struct Hooks<'a> {
    pub progress: &'a dyn Fn(&str),
    pub stop: &'a dyn Fn() -> bool,
}

impl Hooks<'_> {
    /// No progress, never stop: for tests.
    pub fn quiet() -> Hooks<'static> {
        Hooks {
            progress: &|_| {},
            stop: &|| false,
        }
    }

    pub(crate) fn say(&self, s: &str) {
        (self.progress)(s)
    }

    pub(crate) fn stopped(&self) -> bool {
        (self.stop)()
    }
}
