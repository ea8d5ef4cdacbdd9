//! Client-created queries (seed 000 §8.1): on demand, periodic, or event-driven ("notify me
//! when A falls below X / jitter exceeds Y") for any peer the agent can reach, each run as a
//! schedule of its own within the byte budget it was given, bounded in number per client and
//! in all, kept in the store so that they survive a reload and a restart. [`spec`] checks what
//! is asked; [`book`] runs, lists, watches and forgets them.

pub mod book;
pub mod spec;

pub use book::{QueryBook, QueryError, QueryEvent, QueryView, Runner};
pub use spec::{Mode, QueryRequest, QuerySpec};
