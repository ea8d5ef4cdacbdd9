//! Riders: the host's own outgoing IP packets carried in probe padding (MGRP piggybacking,
//! seed 000 §2.4–2.6, §3.2–3.4), as two sans-IO state machines.
//!
//! - [`PayloadBuffer`] (sender): holds packets for a destination while a train to it is
//!   expected, hands one rider per probe (whole, or a fragment that fills the probe), and gives
//!   back what must go at once: packets nobody will carry, leftovers when a train ends, packets
//!   whose hold time `T` is up.
//! - [`Reassembler`] (receiver): puts fragments back together with an RFC 815 hole list.
//!
//! Every call takes the time as `now_ns`; nothing here reads a clock, opens a socket or spawns a
//! thread. Every buffer is bounded, no input panics, and every packet or fragment turned away
//! is counted.

pub mod buffer;
pub mod elastic;
pub mod reassembly;

pub use buffer::{
    BufferConfig, BufferCounters, DelayHistogram, Expired, Packet, PayloadBuffer, RiderChunk,
    MAX_PACKET,
};
pub use reassembly::{Reassembler, ReassemblyConfig, ReassemblyCounters};

#[cfg(test)]
mod roundtrip;
