//! The pieces every experiment on the default testbed stands on: an agent in rcv, sessions
//! from snd.

use crate::{Error, Result};
use mgrp_engine::auth::Key;
use mgrp_engine::client::Session;
use mgrp_engine::daemon::{Agent, AgentConfig};
use mgrp_engine::pacer::Pacer;
use mgrp_testbed::netns::spawn_in;
use mgrp_testbed::{Role, Testbed};
use std::net::SocketAddr;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

/// Run `f` in namespace `ns` (a thread named `what`) and wait for what it makes: an agent, a
/// receiver, a service. Its error says what failed.
pub fn setup<T: Send + 'static>(
    ns: &str,
    what: &str,
    f: impl FnOnce() -> std::result::Result<T, String> + Send + 'static,
) -> Result<T> {
    spawn_in(ns, what, move || f().map_err(mgrp_testbed::Error::Setup))?
        .join()
        .map_err(|_| Error::Worker(format!("{what} thread panicked")))?
        .map_err(Error::from)
}

/// The agents' port on the testbed.
pub const PORT: u16 = 7240;

/// rcv's agent address.
pub fn rcv_addr() -> SocketAddr {
    SocketAddr::new(
        Role::Rcv
            .addr()
            .parse()
            .expect("the testbed's addresses are valid"),
        PORT,
    )
}

/// An agent at the receiving end of `tb` (rcv, port 7240) holding `key`, and its address.
pub fn agent_at_rcv(tb: &Testbed, key: &Key) -> Result<(Agent, SocketAddr)> {
    agent_at_rcv_with(tb, key, None)
}

/// [`agent_at_rcv`], accepting riders through a TUN device of this name if given.
pub fn agent_at_rcv_with(
    tb: &Testbed,
    key: &Key,
    riders_dev: Option<String>,
) -> Result<(Agent, SocketAddr)> {
    let listen = rcv_addr();
    let k = key.clone();
    let agent = spawn_in(&tb.ns(Role::Rcv), "agent", move || {
        let mut c = AgentConfig::new(listen, k);
        c.riders_dev = riders_dev;
        Agent::start(c).map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))
    })?
    .join()
    .map_err(|_| Error::Worker("agent thread panicked".into()))??;
    Ok((agent, listen))
}

/// A session from the current namespace to `peer` with its own pacer.
pub fn connect(peer: SocketAddr, key: &Key) -> Result<Session, mgrp_engine::Error> {
    Session::connect(peer, key, Arc::new(Pacer::spawn()?), Duration::from_secs(3))
}

/// A worker in snd with one session to the agent at rcv (see [`agent_at_rcv`]): each job sent
/// to it is answered with `f(job, session)`, in order, until the job channel closes.
pub fn session_worker<J, R>(
    tb: &Testbed,
    key: Key,
    name: &str,
    mut f: impl FnMut(J, &mut Session) -> R + Send + 'static,
) -> Result<(Sender<J>, Receiver<R>)>
where
    J: Send + 'static,
    R: Send + 'static,
{
    let (jobs_tx, jobs) = channel::<J>();
    let (tx, results) = channel();
    let listen = rcv_addr();
    spawn_in(&tb.ns(Role::Snd), name, move || {
        let mut s = connect(listen, &key).map_err(|e| mgrp_testbed::Error::Setup(e.to_string()))?;
        for job in jobs {
            if tx.send(f(job, &mut s)).is_err() {
                break;
            }
        }
        Ok(())
    })?;
    Ok((jobs_tx, results))
}

/// An agent in rcv with a fresh key and a [`session_worker`] in snd talking to it: what the
/// benches that run one estimator after another stand on. Dropping it ends the worker, then
/// the agent.
pub struct Worker<J, R> {
    jobs: Sender<J>,
    results: Receiver<R>,
    _agent: Agent,
}

impl<J: Send + 'static, R: Send + 'static> Worker<J, R> {
    pub fn start(
        tb: &Testbed,
        name: &str,
        f: impl FnMut(J, &mut Session) -> R + Send + 'static,
    ) -> Result<Worker<J, R>> {
        let key = Key::random();
        let (agent, _) = agent_at_rcv(tb, &key)?;
        let (jobs, results) = session_worker(tb, key, name, f)?;
        Ok(Worker {
            jobs,
            results,
            _agent: agent,
        })
    }

    /// Send `job` and wait up to `timeout` for its answer.
    pub fn ask(&self, job: J, timeout: Duration) -> Result<R> {
        self.jobs
            .send(job)
            .map_err(|_| Error::Worker("estimator worker ended".into()))?;
        self.results
            .recv_timeout(timeout)
            .map_err(|_| Error::Worker("estimator worker timed out".into()))
    }
}
