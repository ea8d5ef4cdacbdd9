//! Interface and qdisc counters read over rtnetlink from inside a namespace.

use crate::Error;
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::tc::{TcAttribute, TcHandle, TcMessage, TcStats2};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use serde::Serialize;

/// Byte and packet counters of one interface.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LinkCounters {
    pub index: u32,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_dropped: u64,
}

/// Counters of a root qdisc.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct QdiscCounters {
    pub ifindex: u32,
    pub kind: String,
    /// Bytes and packets the qdisc has sent (dequeued toward the link).
    pub bytes: u64,
    pub packets: u32,
    pub drops: u32,
    pub overlimits: u32,
    pub requeues: u32,
    /// Bytes and packets waiting in the queue right now.
    pub backlog: u32,
    pub qlen: u32,
}

/// An rtnetlink socket bound to one namespace: the namespace is fixed when the socket is made,
/// so afterwards it can be read from any thread.
pub struct NetlinkStats {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl NetlinkStats {
    /// Open a socket inside namespace `ns`.
    pub fn open_in(ns: &str) -> Result<Self, Error> {
        let handle = crate::netns::spawn_in(ns, "nl-open", || {
            let mut sock = Socket::new(NETLINK_ROUTE)
                .map_err(|e| Error::Setup(format!("netlink socket: {e}")))?;
            sock.bind_auto()
                .map_err(|e| Error::Setup(format!("netlink bind: {e}")))?;
            sock.connect(&SocketAddr::new(0, 0))
                .map_err(|e| Error::Setup(format!("netlink connect: {e}")))?;
            Ok(sock)
        })?;
        let sock = handle
            .join()
            .map_err(|_| Error::Setup("netlink open thread panicked".into()))??;
        Ok(NetlinkStats {
            sock,
            seq: 0,
            buf: vec![0; 64 * 1024],
        })
    }

    /// Counters of every interface in the namespace, with their names.
    pub fn links(&mut self) -> Result<Vec<(String, LinkCounters)>, Error> {
        let msgs = self.dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))?;
        let mut out = Vec::new();
        for m in msgs {
            if let RouteNetlinkMessage::NewLink(link) = m {
                let mut name = None;
                let mut c = LinkCounters {
                    index: link.header.index,
                    ..Default::default()
                };
                for a in link.attributes {
                    match a {
                        LinkAttribute::IfName(n) => name = Some(n),
                        LinkAttribute::Stats64(s) => {
                            c.rx_bytes = s.rx_bytes;
                            c.rx_packets = s.rx_packets;
                            c.tx_bytes = s.tx_bytes;
                            c.tx_packets = s.tx_packets;
                            c.tx_dropped = s.tx_dropped;
                        }
                        _ => {}
                    }
                }
                if let Some(name) = name {
                    out.push((name, c));
                }
            }
        }
        Ok(out)
    }

    /// Counters of every root qdisc in the namespace.
    pub fn root_qdiscs(&mut self) -> Result<Vec<QdiscCounters>, Error> {
        let msgs = self.dump(RouteNetlinkMessage::GetQueueDiscipline(TcMessage::default()))?;
        let mut out = Vec::new();
        for m in msgs {
            let RouteNetlinkMessage::NewQueueDiscipline(tc) = m else {
                continue;
            };
            if tc.header.parent != TcHandle::ROOT {
                continue;
            }
            let mut q = QdiscCounters {
                ifindex: tc.header.index as u32,
                ..Default::default()
            };
            for a in tc.attributes {
                match a {
                    TcAttribute::Kind(k) => q.kind = k,
                    TcAttribute::Stats2(s2) => {
                        for s in s2 {
                            match s {
                                TcStats2::Basic(b) => {
                                    q.bytes = b.bytes;
                                    q.packets = b.packets;
                                }
                                TcStats2::Queue(qs) => {
                                    q.drops = qs.drops;
                                    q.overlimits = qs.overlimits;
                                    q.requeues = qs.requeues;
                                    q.backlog = qs.backlog;
                                    q.qlen = qs.qlen;
                                }
                                _ => {}
                            }
                        }
                    }
                    _ => {}
                }
            }
            out.push(q);
        }
        Ok(out)
    }

    fn dump(&mut self, req: RouteNetlinkMessage) -> Result<Vec<RouteNetlinkMessage>, Error> {
        self.seq = self.seq.wrapping_add(1);
        let mut packet = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::from(req));
        packet.header.flags = NLM_F_DUMP | NLM_F_REQUEST;
        packet.header.sequence_number = self.seq;
        packet.finalize();
        let mut out_buf = vec![0; packet.buffer_len()];
        packet.serialize(&mut out_buf[..]);
        self.sock
            .send(&out_buf, 0)
            .map_err(|e| Error::Counters(format!("netlink send: {e}")))?;
        let mut msgs = Vec::new();
        loop {
            let n = self
                .sock
                .recv(&mut &mut self.buf[..], 0)
                .map_err(|e| Error::Counters(format!("netlink recv: {e}")))?;
            let mut off = 0;
            while off < n {
                let msg: NetlinkMessage<RouteNetlinkMessage> =
                    NetlinkMessage::deserialize(&self.buf[off..n])
                        .map_err(|e| Error::Counters(format!("netlink decode: {e}")))?;
                let len = msg.header.length as usize;
                if msg.header.sequence_number == self.seq {
                    match msg.payload {
                        NetlinkPayload::Done(_) => return Ok(msgs),
                        NetlinkPayload::Error(e) => {
                            return Err(Error::Counters(format!("netlink error: {:?}", e.code)))
                        }
                        NetlinkPayload::InnerMessage(m) => msgs.push(m),
                        _ => {}
                    }
                }
                if len == 0 {
                    break;
                }
                off += len;
            }
        }
    }
}
