//! The probe socket's driver: read each datagram with its kernel timestamp, let the
//! [`Receiver`](crate::proto::receiver::Receiver) judge it, count the verdict, hand riders on.

use crate::daemon::{bump, Shared};
use crate::proto::receiver::{DropReason, Verdict};
use crate::sock::recv_timestamped;
use crate::train::WallNs;
use std::net::UdpSocket;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

pub fn run(udp: UdpSocket, s: Arc<Shared>) {
    crate::pacer::avoid_pacer_cpu();
    let mut buf = vec![0u8; mgrp_wire::probe::MAX_PROBE + 1];
    let c = &s.counters;
    while !s.stop.load(Ordering::Relaxed) {
        // Timeouts (to look at `stop`) and transient errors alike: just read again.
        let Ok(dg) = recv_timestamped(&udp, &mut buf) else {
            continue;
        };
        let rx_ns = dg
            .rx_ns
            .unwrap_or_else(|| WallNs(mgrp_clock::realtime_ns()));
        let verdict = s.receiver().handle_datagram(
            Instant::now(),
            dg.from.map(|a| a.ip()),
            &buf[..dg.len],
            dg.truncated,
            rx_ns,
        );
        let (peer, probe) = match verdict {
            Verdict::Accepted { peer, probe } => {
                bump(&c.probes_ok);
                (peer, probe)
            }
            Verdict::RiderOnly { peer, probe } => (peer, probe),
            Verdict::Dropped(why) => {
                bump(match why {
                    DropReason::Malformed => &c.probes_malformed,
                    DropReason::UnknownSession => &c.probes_unknown_session,
                    DropReason::WrongSource => &c.probes_wrong_source,
                    DropReason::Stale => &c.probes_stale,
                    DropReason::Duplicate => &c.probes_duplicate,
                });
                continue;
            }
        };
        for r in probe.riders.iter() {
            match &s.riders {
                Some(rx) => rx.handle(&s.key, peer, &probe.header, &r),
                None => bump(&c.riders_refused),
            }
        }
    }
}
