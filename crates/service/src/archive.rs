//! The archive queue: copies of estimates pushed to a central PostgreSQL archive from their
//! own thread, so a slow or absent archive never holds up measurement. The queue is bounded;
//! beyond it estimates are dropped and counted (the local store still has them).

use crate::Error;
use mgrp_store::{EstimateStore, Record, StoredMap};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Batches waiting for the archive at most.
pub const ARCHIVE_QUEUE: usize = 1024;

mgrp_counters::counters! {
    /// What the archive did with the estimates it was given.
    pub struct ArchiveCounters => ArchiveSnapshot {
        /// Estimates written to the archive
        pushed,
        /// Estimates dropped: the queue was full
        dropped,
        /// Estimates the archive refused or could not take
        failed,
        /// Netmapper maps written to the archive
        maps_pushed,
        /// Netmapper maps dropped (queue full) or refused
        maps_failed,
    }
}

/// What goes to the archive: estimates, or a map this agent coordinated.
enum Batch {
    Records(Vec<Record>),
    Map(StoredMap),
}

pub struct Archive {
    tx: Option<SyncSender<Batch>>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<ArchiveCounters>,
}

impl Archive {
    /// Connect (a failure here is the operator's to fix: refuse to start) and start pushing.
    pub fn start(url: &str, retention: Duration) -> Result<Archive, Error> {
        let pg = mgrp_store_pg::PgStore::connect(url, retention)?;
        Archive::with_store(Box::new(pg), ARCHIVE_QUEUE)
    }

    /// Push to any store, through a queue of `queue` batches.
    pub fn with_store(store: Box<dyn EstimateStore>, queue: usize) -> Result<Archive, Error> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(queue);
        let counters = Arc::new(ArchiveCounters::default());
        let c = counters.clone();
        let thread = std::thread::Builder::new()
            .name("archive".into())
            .spawn(move || drain(rx, store, &c))
            .map_err(|e| Error::Thread("archive", e))?;
        Ok(Archive {
            tx: Some(tx),
            thread: Some(thread),
            counters,
        })
    }

    /// Queue a copy; never blocks.
    pub fn push(&self, recs: &[Record]) {
        if let Some(tx) = &self.tx {
            if tx.try_send(Batch::Records(recs.to_vec())).is_err() {
                self.counters
                    .bump(&self.counters.dropped, recs.len() as u64);
            }
        }
    }

    /// Queue a copy of a map; never blocks.
    pub fn push_map(&self, map: StoredMap) {
        if let Some(tx) = &self.tx {
            if tx.try_send(Batch::Map(map)).is_err() {
                self.counters.bump(&self.counters.maps_failed, 1);
            }
        }
    }

    pub fn snapshot(&self) -> ArchiveSnapshot {
        self.counters.snapshot()
    }

    /// (name, value) pairs for /metrics.
    pub fn counters(&self) -> Vec<(String, u64)> {
        self.snapshot()
            .pairs()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }
}

/// Write batches until the queue closes; say each new kind of failure once.
fn drain(rx: Receiver<Batch>, mut store: Box<dyn EstimateStore>, c: &ArchiveCounters) {
    let mut last = String::new();
    for batch in rx {
        let (r, ok, failed, n) = match &batch {
            Batch::Records(recs) => (store.insert(recs), &c.pushed, &c.failed, recs.len()),
            Batch::Map(m) => (store.put_map(m), &c.maps_pushed, &c.maps_failed, 1),
        };
        match r {
            Ok(()) => {
                c.bump(ok, n as u64);
                last.clear();
            }
            Err(e) => {
                c.bump(failed, n as u64);
                let why = e.to_string();
                if why != last {
                    eprintln!("mgrp agent: archive: {why}");
                    last = why;
                }
            }
        }
    }
}

impl Drop for Archive {
    fn drop(&mut self) {
        // Closing the channel ends the thread once the queue is written.
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mgrp_store::Store;

    fn rec(i: u64) -> Record {
        Record {
            path: "a->b".into(),
            metric: "avail_bw".into(),
            t_ns: 1_000 + i,
            value: i as f64,
            low: 0.0,
            high: 0.0,
            method: "x".into(),
            source: "active".into(),
            probe_bytes: 0,
            trains: 0,
            confidence: 1.0,
            elapsed_s: 0.0,
            final_: true,
            timescale_ms: None,
        }
    }

    /// A store that says when an insert begins and waits to be let go (or for its gate to
    /// close) before storing.
    struct Gate {
        entered: std::sync::mpsc::Sender<()>,
        go: std::sync::mpsc::Receiver<()>,
        inner: Store,
    }

    impl EstimateStore for Gate {
        fn insert(&mut self, r: &[Record]) -> Result<(), mgrp_store::Error> {
            let _ = self.entered.send(());
            let _ = self.go.recv();
            self.inner.insert(r)
        }
        fn range(
            &self,
            p: &str,
            m: &str,
            f: u64,
            t: u64,
            l: usize,
        ) -> Result<Vec<Record>, mgrp_store::Error> {
            self.inner.range(p, m, f, t, l)
        }
        fn latest(&self, p: &str, m: &str) -> Result<Option<Record>, mgrp_store::Error> {
            self.inner.latest(p, m)
        }
        fn series(&self) -> Result<Vec<(String, String)>, mgrp_store::Error> {
            self.inner.series()
        }
        fn scale(
            &self,
            p: &str,
            m: &str,
            s: Duration,
            c: usize,
            e: u64,
        ) -> Result<mgrp_store::ScaleAnswer, mgrp_store::Error> {
            self.inner.scale(p, m, s, c, e)
        }
        fn apply_retention(&mut self, n: u64) -> Result<usize, mgrp_store::Error> {
            self.inner.apply_retention(n)
        }
        fn count(&self) -> Result<u64, mgrp_store::Error> {
            self.inner.count()
        }
        fn put_map(&mut self, m: &mgrp_store::StoredMap) -> Result<(), mgrp_store::Error> {
            self.inner.put_map(m)
        }
        fn latest_maps(&self) -> Result<Vec<mgrp_store::StoredMap>, mgrp_store::Error> {
            self.inner.latest_maps()
        }
        fn queries(&self) -> Result<Vec<(String, String)>, mgrp_store::Error> {
            self.inner.queries()
        }
        fn put_query(&mut self, id: &str, spec: &str) -> Result<(), mgrp_store::Error> {
            self.inner.put_query(id, spec)
        }
        fn delete_query(&mut self, id: &str) -> Result<bool, mgrp_store::Error> {
            self.inner.delete_query(id)
        }
    }

    #[test]
    fn a_stuck_archive_drops_and_counts_beyond_its_queue() {
        let (entered_tx, entered) = std::sync::mpsc::channel();
        let (go_tx, go) = std::sync::mpsc::channel();
        let store = Gate {
            entered: entered_tx,
            go,
            inner: Store::in_memory(Duration::from_secs(3600)).unwrap(),
        };
        let a = Archive::with_store(Box::new(store), 1).unwrap();
        a.push(&[rec(0)]);
        // The thread holds the first batch, stuck in insert: the queue has room for one.
        entered.recv().unwrap();
        a.push(&[rec(1)]);
        a.push(&[rec(2), rec(3)]);
        assert_eq!(a.snapshot().dropped, 2);
        // Closing the gate lets every insert through; dropping the archive drains the queue.
        drop(go_tx);
        let c = a.counters.clone();
        drop(a);
        assert_eq!(
            c.snapshot(),
            ArchiveSnapshot {
                pushed: 2,
                dropped: 2,
                failed: 0,
                maps_pushed: 0,
                maps_failed: 0,
            }
        );
    }

    /// Maps go through the same queue to the store's map table; one it refuses is counted.
    #[test]
    fn maps_are_archived_and_refusals_counted() {
        let store = Store::in_memory(Duration::from_secs(3600)).unwrap();
        let a = Archive::with_store(Box::new(store), 4).unwrap();
        let map = |c: &str| StoredMap {
            coordinator: c.into(),
            t_ns: 1,
            json: "{}".into(),
        };
        a.push_map(map("agent-a"));
        a.push_map(map(""));
        a.push(&[rec(0)]);
        let c = a.counters.clone();
        drop(a);
        let s = c.snapshot();
        assert_eq!((s.maps_pushed, s.maps_failed, s.pushed), (1, 1, 1));
    }
}
