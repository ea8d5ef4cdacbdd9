//! Start, stop and reload: the store and archive opened, one driver thread per schedule and
//! per passive source, the transfer modes loaded and fed, the hub told what runs, and a new
//! configuration applied in place.

use crate::archive::Archive;
use crate::config::{self, PassiveSource, PathSchedule, ServiceConfig};
use crate::driver::Driver;
use crate::hub::{counter_pairs, Hub};
use crate::passive::{self, PassiveState};
use crate::path::{CounterSnapshot, PathState};
use crate::transfer::{self, TransferRun};
use crate::{Error, SharedStore};
use mgrp_engine::auth::Key;
use mgrp_engine::pacer::Pacer;
use mgrp_engine::riders::RiderSender;
use mgrp_store::{Durability, EstimateStore, Store};
use serde::Serialize;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

/// What a reload changed, and what it could not change without a restart.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct ReloadReport {
    pub started: Vec<String>,
    pub stopped: Vec<String>,
    pub kept: usize,
    pub token_changed: bool,
    /// Settings that differ but only take effect at the next start.
    pub need_restart: Vec<String>,
    /// What happened to the transfer modes, if anything: `loaded`, `unloaded`, `reloaded`
    /// (other modes, or a load that had failed), `updated` (parameters or peers, in place).
    pub transfer: Option<&'static str>,
}

struct Running {
    state: Arc<PathState>,
    thread: JoinHandle<()>,
}

struct RunningPassive {
    src: PassiveSource,
    state: Arc<PassiveState>,
    thread: JoinHandle<()>,
}

pub struct Service {
    hub: Arc<Hub>,
    cfg: ServiceConfig,
    key: Key,
    pacer: Option<Arc<Pacer>>,
    riders: Option<Arc<RiderSender>>,
    inline: Option<crate::inline::InlineRun>,
    running: Vec<Running>,
    passive: Vec<RunningPassive>,
    transfer: Option<TransferRun>,
    /// Counters of schedules stopped by reloads, so totals never go backwards.
    retired: CounterSnapshot,
    /// Netmapper's thread, for `[map]` (started once; a reload does not change it).
    netmap: Option<crate::netmap::MapRun>,
}

/// Open the store a configuration names.
pub fn open_store(cfg: &ServiceConfig) -> Result<Box<dyn EstimateStore>, Error> {
    Ok(match &cfg.store {
        Some(config::StoreAt::File(p)) => {
            Box::new(Store::open(p, Durability::Process, cfg.retention)?)
        }
        Some(config::StoreAt::Postgres(url)) => {
            Box::new(mgrp_store_pg::PgStore::connect(url, cfg.retention)?)
        }
        None => Box::new(Store::in_memory(cfg.retention)?),
    })
}

fn start_riders(
    cfg: &config::RidersConfig,
    key: &Key,
    hub: &Hub,
) -> Result<Arc<RiderSender>, Error> {
    let sender = Arc::new(RiderSender::start(
        &mgrp_engine::riders::RiderConfig {
            dev: cfg.dev.clone(),
            opt_in: cfg.opt_in.clone(),
            hold: cfg.hold,
            ratio: cfg.ratio,
            elastic: cfg.elastic,
        },
        key.clone(),
    )?);
    let s = sender.clone();
    hub.add_counters(
        "riders_sent",
        Box::new(move || {
            let mut v = counter_pairs(&s.counters());
            if let Some(b) = s.buffer_counters() {
                v.extend(
                    counter_pairs(&b)
                        .into_iter()
                        .map(|(k, x)| (format!("buffer_{k}"), x)),
                );
            }
            v
        }),
    );
    Ok(sender)
}

impl Service {
    /// Open the store and start one scheduler thread per configured path.
    pub fn start(cfg: &ServiceConfig, key: Key) -> Result<Service, Error> {
        let hub = Hub::new(open_store(cfg)?, cfg.token.clone());
        if let Some(url) = &cfg.archive {
            let a = Arc::new(Archive::start(url, cfg.retention)?);
            let c = a.clone();
            hub.add_counters("archive", Box::new(move || c.counters()));
            if let Ok(mut g) = hub.archive.write() {
                *g = Some(a);
            }
        }
        let riders = match &cfg.riders {
            Some(r) => Some(start_riders(r, &key, &hub)?),
            None => None,
        };
        let inline = match &cfg.inline {
            Some(i) => Some(crate::inline::start(i, &hub)?),
            None => None,
        };
        let mut svc = Service {
            hub,
            cfg: cfg.clone(),
            key,
            riders,
            inline,
            pacer: None,
            running: Vec::new(),
            passive: Vec::new(),
            transfer: None,
            retired: CounterSnapshot::default(),
            netmap: None,
        };
        // Before the schedules, so that their first estimates feed the modes.
        if let Some(t) = &cfg.transfer {
            svc.start_transfer(t, &cfg.paths)?;
        }
        svc.start_mpat(cfg.mpat.as_ref());
        for p in &cfg.paths {
            svc.start_path(p.clone())?;
        }
        for p in &cfg.passive {
            svc.start_passive(p.clone())?;
        }
        // Queries clients made before a restart run again.
        let runner = crate::queries::Runner::new(
            svc.key.clone(),
            svc.riders.clone(),
            Arc::downgrade(&svc.hub),
        );
        svc.hub.queries.attach(runner, &svc.hub);
        if let Some(m) = &cfg.map {
            let run = crate::netmap::start(m, svc.key.clone(), svc.hub.clone())
                .map_err(|e| Error::Thread("netmapper", e))?;
            svc.netmap = Some(run);
        }
        Ok(svc)
    }

    /// Stop the mapping thread (after its current flow) and start the new schedule, if any;
    /// the last map stays on show until a new one is made.
    fn reload_map(
        &mut self,
        new: Option<&crate::netmap::MapSchedule>,
        rep: &mut ReloadReport,
    ) -> Result<(), Error> {
        if self.netmap.take().is_some() {
            rep.stopped.push("map".into());
        }
        self.hub.update_map(|m| {
            m.schedule = None;
            m.running = false;
        });
        if let Some(m) = new {
            let run = crate::netmap::start(m, self.key.clone(), self.hub.clone())
                .map_err(|e| Error::Thread("netmapper", e))?;
            self.netmap = Some(run);
            rep.started
                .push(format!("map of {} agents", m.agents.len()));
        }
        Ok(())
    }

    fn start_transfer(
        &mut self,
        t: &config::TransferConfig,
        paths: &[PathSchedule],
    ) -> Result<(), Error> {
        let run = transfer::start(t, peers(paths), &self.hub)?;
        self.hub.set_transfer(Some(run.state.clone()));
        self.transfer = Some(run);
        Ok(())
    }

    /// Load MPAT for `[mpat]` (or note why it is unavailable), or unload it.
    fn start_mpat(&mut self, m: Option<&crate::mpat::MpatConfig>) {
        // The old controls go first: both cannot be registered at once.
        self.hub.set_mpat(None);
        if let Some(m) = m {
            let paths = crate::mpat::path_infos(&self.hub);
            let st = crate::mpat::MpatState::start(m, &paths);
            self.hub.set_mpat(Some(Arc::new(st)));
        }
    }

    /// Unload the modes: sockets still on one move to the default congestion control.
    fn stop_transfer(&mut self) {
        self.hub.set_transfer(None);
        if let Some(t) = self.transfer.take() {
            t.stop();
        }
    }

    /// A reload's `[transfer]`: started, stopped, restarted (other modes, or a load that
    /// failed before), or handed the new parameters and peers in place.
    fn reload_transfer(
        &mut self,
        new: &ServiceConfig,
        rep: &mut ReloadReport,
    ) -> Result<(), Error> {
        let old = self.cfg.transfer.clone();
        let Some(t) = &new.transfer else {
            if old.is_some() {
                self.stop_transfer();
                rep.transfer = Some("unloaded");
            }
            return Ok(());
        };
        let in_place = self
            .transfer
            .as_ref()
            .is_some_and(|r| r.modes == t.modes && r.state.available());
        if in_place {
            if let Some(r) = &self.transfer {
                r.reconfigure(t.clone(), peers(&new.paths));
            }
            if old.as_ref() != Some(t) || new.paths != self.cfg.paths {
                rep.transfer = Some("updated");
            }
            return Ok(());
        }
        rep.transfer = Some("loaded");
        if self.transfer.is_some() {
            self.stop_transfer();
            rep.transfer = Some("reloaded");
        }
        self.start_transfer(t, &new.paths)?;
        Ok(())
    }

    fn start_passive(&mut self, src: PassiveSource) -> Result<(), Error> {
        let state = Arc::new(PassiveState::default());
        let (hub, st, s) = (self.hub.clone(), state.clone(), src.clone());
        let peer = match src.peer {
            Some(_) => Some(passive::PeerAccess {
                key: self.key.clone(),
                pacer: match &self.pacer {
                    Some(p) => p.clone(),
                    None => self.pacer.insert(Arc::new(Pacer::spawn()?)).clone(),
                },
            }),
            None => None,
        };
        let thread = std::thread::Builder::new()
            .name(format!("passive-{}", src.iface))
            .spawn(move || passive::run(&s, &st, &hub, peer))
            .map_err(|e| Error::Thread("passive", e))?;
        self.passive.push(RunningPassive { src, state, thread });
        self.publish_passive();
        Ok(())
    }

    fn publish_passive(&self) {
        if let Ok(mut g) = self.hub.passive.write() {
            *g = self
                .passive
                .iter()
                .map(|r| (r.src.clone(), r.state.clone()))
                .collect();
        }
    }

    fn start_path(&mut self, p: PathSchedule) -> Result<(), Error> {
        let pacer = match &self.pacer {
            Some(p) => p.clone(),
            None => self.pacer.insert(Arc::new(Pacer::spawn()?)).clone(),
        };
        // The driver derives the default budget before its first round.
        let state = Arc::new(PathState::new(
            p.clone(),
            p.budget.unwrap_or(crate::budget::FLOOR),
        ));
        let driver = Driver {
            st: state.clone(),
            key: self.key.clone(),
            pacer,
            hub: self.hub.clone(),
            riders: self.riders.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("sched-{}", p.peer))
            .spawn(move || driver.run())
            .map_err(|e| Error::Thread("scheduler", e))?;
        self.running.push(Running { state, thread });
        self.publish_paths();
        Ok(())
    }

    fn publish_paths(&self) {
        if let Ok(mut g) = self.hub.paths.write() {
            *g = self.running.iter().map(|r| r.state.clone()).collect();
        }
    }

    pub fn hub(&self) -> Arc<Hub> {
        self.hub.clone()
    }

    pub fn store(&self) -> SharedStore {
        self.hub.store()
    }

    /// The riders' sender, when `[riders]` is configured.
    pub fn riders(&self) -> Option<&RiderSender> {
        self.riders.as_deref()
    }

    /// The inline engine, when `[inline]` is configured.
    pub fn inline(&self) -> Option<&mgrp_engine::inline::InlineEngine> {
        self.inline.as_ref().map(|i| i.engine())
    }

    pub fn config(&self) -> &ServiceConfig {
        &self.cfg
    }

    /// Totals over all schedules, including those stopped by reloads.
    pub fn counters(&self) -> CounterSnapshot {
        self.running
            .iter()
            .fold(self.retired, |acc, r| acc + r.state.counters())
    }

    /// Apply a new configuration without a restart: schedules that changed are stopped and
    /// started anew, unchanged ones keep running (and their history of bytes spent), the token
    /// is replaced. Store, retention and the HTTP address need a restart; the report says so.
    pub fn reload(&mut self, new: &ServiceConfig) -> Result<ReloadReport, Error> {
        let mut rep = ReloadReport::default();
        if new.store != self.cfg.store {
            rep.need_restart.push("store".into());
        }
        if new.archive != self.cfg.archive {
            rep.need_restart.push("archive".into());
        }
        if new.retention != self.cfg.retention {
            rep.need_restart.push("retention".into());
        }
        if new.http != self.cfg.http {
            rep.need_restart.push("http".into());
        }
        if new.riders != self.cfg.riders {
            rep.need_restart.push("riders".into());
        }
        if new.inline != self.cfg.inline {
            rep.need_restart.push("inline".into());
        }
        if new.token != self.cfg.token {
            self.hub.set_token(new.token.clone());
            rep.token_changed = true;
        }
        let (keep, stop): (Vec<Running>, Vec<Running>) = std::mem::take(&mut self.running)
            .into_iter()
            .partition(|r| new.paths.contains(&r.state.sched));
        self.running = keep;
        self.publish_paths();
        for r in &stop {
            r.state.stop.store(true, Ordering::Relaxed);
        }
        for r in stop {
            let _ = r.thread.join();
            self.retired = self.retired + r.state.counters();
            rep.stopped.push(describe(&r.state.sched));
        }
        let (keep, stop): (Vec<RunningPassive>, Vec<RunningPassive>) =
            std::mem::take(&mut self.passive)
                .into_iter()
                .partition(|r| new.passive.contains(&r.src));
        self.passive = keep;
        self.publish_passive();
        for r in &stop {
            r.state.stop.store(true, Ordering::Relaxed);
        }
        for r in stop {
            let _ = r.thread.join();
            rep.stopped.push(format!("passive on {}", r.src.iface));
        }
        rep.kept = self.running.len() + self.passive.len();
        self.reload_transfer(new, &mut rep)?;
        if new.mpat != self.cfg.mpat {
            self.start_mpat(new.mpat.as_ref());
        }
        if new.map != self.cfg.map {
            self.reload_map(new.map.as_ref(), &mut rep)?;
        }
        for p in &new.paths {
            if !self.running.iter().any(|r| r.state.sched == *p) {
                self.start_path(p.clone())?;
                rep.started.push(describe(p));
            }
        }
        for p in &new.passive {
            if !self.passive.iter().any(|r| r.src == *p) {
                self.start_passive(p.clone())?;
                rep.started.push(format!("passive on {}", p.iface));
            }
        }
        let (store, retention, http) = (self.cfg.store.clone(), self.cfg.retention, self.cfg.http);
        self.cfg = new.clone();
        // What was not applied stays as it runs.
        self.cfg.store = store;
        self.cfg.retention = retention;
        self.cfg.http = http;
        Ok(rep)
    }

    /// Stop the schedulers (each after its current train) and wait for them.
    pub fn stop(mut self) -> CounterSnapshot {
        self.halt();
        self.retired
    }

    fn halt(&mut self) {
        self.hub.queries.detach();
        for r in &self.running {
            r.state.stop.store(true, Ordering::Relaxed);
        }
        for r in &self.passive {
            r.state.stop.store(true, Ordering::Relaxed);
        }
        for r in self.passive.drain(..) {
            let _ = r.thread.join();
        }
        if let Ok(mut g) = self.hub.passive.write() {
            g.clear();
        }
        for r in self.running.drain(..) {
            let _ = r.thread.join();
            self.retired = self.retired + r.state.counters();
        }
        if let Ok(mut g) = self.hub.paths.write() {
            g.clear();
        }
        self.stop_transfer();
        self.hub.set_mpat(None);
        if let Some(i) = self.inline.take() {
            i.stop();
        }
    }
}

/// The scheduled peers' addresses: the destinations the transfer modes feed.
fn peers(paths: &[PathSchedule]) -> Vec<IpAddr> {
    paths.iter().map(|p| p.peer.ip()).collect()
}

fn describe(p: &PathSchedule) -> String {
    let budget = match p.budget {
        Some(b) => format!("{b} B/min"),
        None => "default budget".into(),
    };
    format!("{} {} every {:?}, {budget}", p.peer, p.method, p.every)
}

impl Drop for Service {
    fn drop(&mut self) {
        self.halt();
    }
}
