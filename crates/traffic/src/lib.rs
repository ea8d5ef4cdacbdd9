//! Traffic patterns and units, shared by the testbed's generators and the estimators' fluid
//! model. Pure: no sockets, no clocks.

pub mod pattern;
pub mod units;

pub use pattern::{CrossPattern, Schedule};

/// A pattern, rate, size or duration that does not parse, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    BadInput(String),
}
