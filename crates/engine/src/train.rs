//! Trains: the one vocabulary of [`mgrp_train`], re-exported so engine users need one import,
//! and the engine's own limits checked against the wire format.

pub use mgrp_train::*;

// The smallest probe the vocabulary allows is the wire format's header.
const _: () = assert!(MIN_PROBE_SIZE as usize == mgrp_wire::probe::HEADER_LEN);
// A train's probe indices fit the header's u16 fields.
const _: () = assert!(MAX_TRAIN_LEN <= u16::MAX as usize);

/// The receiver's report records as arrivals.
pub(crate) fn arrivals(records: &[mgrp_wire::control::RxRecord]) -> Vec<Arrival> {
    records
        .iter()
        .map(|r| Arrival {
            index: r.index,
            size: r.size,
            rx_ns: WallNs(r.rx_ns),
        })
        .collect()
}
