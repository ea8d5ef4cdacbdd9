//! Building a topology: namespaces, veths, addresses, routes, shapers, delay lines, and the
//! guard that tears it all down.

use super::spec::{IcmpRateLimit, LinkDir, NodeKind, Topology};
use crate::capacity::{self, LinkCapacity, ShaperAt};
use crate::delayline::{DelayLine, DelayStats, LineParams};
use crate::generator::{CrossTraffic, Endpoints, GenOptions, BASE_PORT};
use crate::netns::{self, ip_batch, sh_in};
use crate::topology::{self, pid_alive, validate_name, DelayMode, State, TestbedConfig, NS_PREFIX};
use crate::Error;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Namespace names stay at most this long (`mgrp-NAME-NODE`).
pub const MAX_NS_NAME: usize = 40;
/// Routing table the delay lines' re-injected packets are looked up in.
const DELAY_TABLE: u32 = 100;
/// Port of the sink the capacity flood is sent to (below the generators' ports).
const CAPACITY_PORT: u16 = 5199;
/// Priority of the foreground-counting filters on a downstream ingress.
pub(crate) const FG_PRIO: u16 = 10;

/// How to bring a topology up.
#[derive(Debug, Clone)]
pub struct TopoOptions {
    /// Instance name; namespaces are `mgrp-NAME-NODE`. `None` picks a unique one.
    pub name: Option<String>,
    /// Flood every shaped direction once and use what it drains as its capacity.
    pub measure_capacity: bool,
    pub delay_mode: DelayMode,
    /// Where the topology came from (a built-in name or a path), for people.
    pub source: String,
}

impl Default for TopoOptions {
    fn default() -> Self {
        TopoOptions {
            name: None,
            measure_capacity: true,
            delay_mode: DelayMode::Thread,
            source: "(text)".into(),
        }
    }
}

/// Configured and measured capacity of one shaped direction.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DirCapacity {
    /// `r1→r2`.
    pub label: String,
    /// Link index in the file (0-based).
    pub link: usize,
    pub from: String,
    pub to: String,
    pub capacity: LinkCapacity,
}

/// What the state file remembers about a topology testbed (inside [`State`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TopoState {
    pub source: String,
    /// The topology file's text, from which everything else is derived again.
    pub spec: String,
    pub capacities: Vec<DirCapacity>,
    /// Delay-line processes (for testbeds made by `testbed up`).
    #[serde(default)]
    pub delay_pids: Vec<u32>,
}

enum DelayRunner {
    Thread(DelayLine),
    Process(u32),
}

/// A live topology. Dropping an owned one (also while unwinding from a panic) tears it down:
/// delay lines, every `mgrp-NAME-*` namespace (and with them veths, qdiscs, filters), the state.
pub struct TopoTestbed {
    name: String,
    topo: Topology,
    state: State,
    /// Each delayed or lossy link's line, with the link's index.
    delays: Vec<(usize, DelayRunner)>,
    owned: bool,
    /// CPUs held out of idle while this testbed is up (`topology::hold_cpus_awake`).
    _awake: Option<mgrp_clock::cpu::AwakeCpus>,
}

static NEXT_ID: AtomicU32 = AtomicU32::new(0);

fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl TopoTestbed {
    /// Check `spec` (a topology file's text) and build it. Bad input is refused before anything
    /// exists; a failure part-way tears down what was made.
    pub fn up(spec: &str, opts: TopoOptions) -> Result<TopoTestbed, Error> {
        let topo = Topology::parse(spec)?;
        let name = match &opts.name {
            Some(n) => n.clone(),
            None => format!(
                "t{}-{}",
                std::process::id(),
                NEXT_ID.fetch_add(1, Ordering::Relaxed)
            ),
        };
        validate_name(&name)?;
        let longest = topo.nodes.iter().map(|n| n.name.len()).max().unwrap_or(0);
        if NS_PREFIX.len() + name.len() + 1 + longest > MAX_NS_NAME {
            return Err(Error::BadInput(format!(
                "testbed name {name:?} is too long for this topology's node names: \
                 mgrp-NAME-NODE must fit in {MAX_NS_NAME} characters"
            )));
        }
        netns::check_privileges()?;
        for t in ["ip", "tc", "ethtool"] {
            netns::tool(t)?;
        }
        if !topology::existing_namespaces(&name).is_empty() || State::path(&name).exists() {
            return Err(Error::BadInput(format!(
                "a testbed named {name:?} already exists; `mgrp testbed down {name}` removes it"
            )));
        }
        let state = State {
            name: name.clone(),
            config: summary_config(&topo),
            owner_pid: Some(std::process::id()),
            delay_pid: None,
            loss_pid: None,
            delay_impl: None,
            capacity: None,
            created_unix_s: now_unix_s(),
            topology: Some(TopoState {
                source: opts.source.clone(),
                spec: spec.to_string(),
                capacities: Vec::new(),
                delay_pids: Vec::new(),
            }),
        };
        // From here on, the guard's Drop cleans up whatever exists.
        let mut tb = TopoTestbed {
            name,
            topo,
            state,
            delays: Vec::new(),
            owned: true,
            _awake: crate::topology::hold_cpus_awake(),
        };
        tb.state.save()?;
        tb.build()?;
        let caps = if opts.measure_capacity {
            tb.measure_capacities()?
        } else {
            tb.configured_capacities()
        };
        tb.set_capacities(caps)?;
        tb.start_delays(&opts.delay_mode)?;
        Ok(tb)
    }

    /// A handle on a topology testbed made by another process; dropping it changes nothing.
    pub fn attach(name: &str) -> Result<TopoTestbed, Error> {
        let state = State::load(name).ok_or_else(|| {
            Error::NotFound(format!(
                "no testbed named {name:?} (see `mgrp testbed status`)"
            ))
        })?;
        let spec = state
            .topology
            .as_ref()
            .ok_or_else(|| Error::BadInput(format!("testbed {name:?} is not a topology")))?;
        Ok(TopoTestbed {
            name: name.into(),
            topo: Topology::parse(&spec.spec)?,
            state,
            delays: Vec::new(),
            owned: false,
            _awake: None,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn topology(&self) -> &Topology {
        &self.topo
    }
    pub fn source(&self) -> &str {
        self.topo_state().map_or("", |t| t.source.as_str())
    }
    fn topo_state(&self) -> Option<&TopoState> {
        self.state.topology.as_ref()
    }

    /// Configured and measured capacity of every shaped direction.
    pub fn capacities(&self) -> &[DirCapacity] {
        self.topo_state().map_or(&[], |t| t.capacities.as_slice())
    }

    /// The capacity of one shaped direction.
    pub fn capacity(&self, d: LinkDir) -> Option<LinkCapacity> {
        self.capacities()
            .iter()
            .find(|c| c.link == d.link && c.from == self.topo.nodes[d.from].name)
            .map(|c| c.capacity)
    }

    /// The namespace of node `node` (by index).
    pub fn ns(&self, node: usize) -> String {
        format!("{NS_PREFIX}{}-{}", self.name, self.topo.nodes[node].name)
    }

    /// The namespace of the node called `name`.
    pub fn ns_of(&self, name: &str) -> Result<String, Error> {
        self.topo
            .index(name)
            .map(|i| self.ns(i))
            .ok_or_else(|| Error::BadInput(format!("no node {name:?} in this topology")))
    }

    /// Where the shaper of direction `d` is: the egress of `d.from` toward `d.to`.
    pub fn shaper_at(&self, d: LinkDir) -> ShaperAt {
        ShaperAt {
            ns: self.ns(d.from),
            dev: self.topo.dev(d.link, d.from).to_string(),
        }
    }

    /// Endpoints for traffic from host `from` to host `to` on `port`.
    pub fn endpoints(&self, from: usize, to: usize, port: u16) -> Endpoints {
        Endpoints {
            src_ns: self.ns(from),
            dst_ns: self.ns(to),
            dst: SocketAddr::new(self.topo.host_addr(to).into(), port),
        }
    }

    /// Start the file's `[[flow]]`s; flow i sends to port BASE_PORT + i.
    pub fn start_flows(&self, opts: &GenOptions) -> Result<Vec<CrossTraffic>, Error> {
        let mut out = Vec::new();
        for (i, f) in self.topo.flows.iter().enumerate() {
            let ends = self.endpoints(f.from, f.to, BASE_PORT + i as u16);
            out.push(CrossTraffic::start_between(&ends, &f.pattern, opts)?);
        }
        Ok(out)
    }

    /// The delay lines' process ids, when they run as their own processes.
    pub fn delay_pids(&self) -> Vec<u32> {
        self.delays
            .iter()
            .filter_map(|(_, d)| match d {
                DelayRunner::Process(p) => Some(*p),
                DelayRunner::Thread(_) => None,
            })
            .collect()
    }

    /// What the line of link `link` did so far (packets held, lost, lateness), if it has one
    /// that runs in this process or reports to its statistics file.
    pub fn line_stats(&self, link: usize) -> Option<DelayStats> {
        match self.delays.iter().find(|(l, _)| *l == link)? {
            (_, DelayRunner::Thread(line)) => Some(line.stats()),
            (_, DelayRunner::Process(_)) => {
                let f = std::path::PathBuf::from(topology::STATE_DIR)
                    .join(format!("{}.delay-{link}.json", self.name));
                serde_json::from_slice(&std::fs::read(f).ok()?).ok()
            }
        }
    }

    /// Leave the testbed standing after this process ends (`testbed up`).
    pub fn persist(mut self) -> Result<(), Error> {
        if self
            .delays
            .iter()
            .any(|(_, d)| matches!(d, DelayRunner::Thread(_)))
        {
            return Err(Error::Setup(
                "a delay line running as a thread cannot outlive its process".into(),
            ));
        }
        self.state.owner_pid = None;
        self.state.save()?;
        self.owned = false;
        Ok(())
    }

    fn build(&mut self) -> Result<(), Error> {
        let t = &self.topo;
        let all: Vec<usize> = (0..t.nodes.len()).collect();
        let adds: String = all
            .iter()
            .map(|&n| format!("netns add {}\n", self.ns(n)))
            .collect();
        netns::run_with_input("ip", &["-batch", "-"], Some(&adds))?;

        // Sysctls first, so links created afterwards inherit `default`.
        for &n in &all {
            sh_in(&self.ns(n), &sysctl_script(t.nodes[n].kind, t.icmp))?;
        }
        // One veth per link, each end named after the node it reaches.
        for (i, l) in t.links.iter().enumerate() {
            ip_batch(
                &self.ns(l.a),
                &format!(
                    "link add name {} type veth peer name {} netns {}\n",
                    t.dev(i, l.a),
                    t.dev(i, l.b),
                    self.ns(l.b)
                ),
            )?;
        }
        for &n in &all {
            let mut s = String::from("link set lo up\n");
            let mut offloads = String::new();
            for l in t.links_of(n) {
                let dev = t.dev(l, n);
                s.push_str(&format!(
                    "addr add {}/24 dev {dev}\nlink set dev {dev} up\n",
                    t.addr(l, n)
                ));
                // Per-packet timing is meaningless if the kernel coalesces packets.
                offloads.push_str(&format!(
                    "ethtool -K {dev} gso off tso off gro off 2>/dev/null || ethtool -K {dev} gso off gro off\n"
                ));
            }
            for r in t.routes(n) {
                s.push_str(&format!(
                    "route add {} via {} dev {}\n",
                    r.dst, r.via, r.dev
                ));
            }
            ip_batch(&self.ns(n), &s)?;
            sh_in(&self.ns(n), &offloads)?;
        }
        for d in t.shaped_dirs() {
            let shaping = t.links[d.link].shaping.as_ref().expect("shaped link");
            let at = self.shaper_at(d);
            netns::run_with_input(
                "tc",
                &["-n", &at.ns, "-batch", "-"],
                Some(&shaping.as_config().shaper_script_on(&at.dev)),
            )?;
            if let Some(fg) = t.measure {
                let (ns, dev) = (self.ns(d.to), t.dev(d.link, d.to));
                let (ip, tc) = fg_counter_scripts(
                    dev,
                    t.host_addr(fg.0).to_string(),
                    t.host_addr(fg.1).to_string(),
                );
                ip_batch(&ns, &ip)?;
                netns::run_with_input("tc", &["-n", &ns, "-batch", "-"], Some(&tc))?;
            }
        }
        Ok(())
    }

    fn configured_capacities(&self) -> Vec<DirCapacity> {
        self.topo
            .shaped_dirs()
            .into_iter()
            .map(|d| self.dir_capacity(d, LinkCapacity::configured(self.configured_bps(d) as f64)))
            .collect()
    }

    fn configured_bps(&self, d: LinkDir) -> u64 {
        self.topo.links[d.link]
            .shaping
            .as_ref()
            .map_or(0, |s| s.capacity_bps)
    }

    fn dir_capacity(&self, d: LinkDir, capacity: LinkCapacity) -> DirCapacity {
        DirCapacity {
            label: self.topo.dir_label(d),
            link: d.link,
            from: self.topo.nodes[d.from].name.clone(),
            to: self.topo.nodes[d.to].name.clone(),
            capacity,
        }
    }

    /// Flood each shaped direction from its upstream node to a sink in its downstream node
    /// (routers run the sockets themselves), one at a time so floods do not share the CPU.
    fn measure_capacities(&self) -> Result<Vec<DirCapacity>, Error> {
        let mut out = Vec::new();
        for d in self.topo.shaped_dirs() {
            let flood = Endpoints {
                src_ns: self.ns(d.from),
                dst_ns: self.ns(d.to),
                dst: SocketAddr::new(self.topo.addr(d.link, d.to).into(), CAPACITY_PORT),
            };
            let c = capacity::measure(&self.shaper_at(d), &flood, self.configured_bps(d))
                .map_err(|e| Error::Setup(format!("{}: {e}", self.topo.dir_label(d))))?;
            out.push(self.dir_capacity(d, c));
        }
        Ok(out)
    }

    fn set_capacities(&mut self, caps: Vec<DirCapacity>) -> Result<(), Error> {
        // The summary fields describe the tightest direction, for `testbed status`.
        self.state.capacity = caps
            .iter()
            .map(|c| c.capacity)
            .min_by(|a, b| a.bps().total_cmp(&b.bps()));
        if let Some(t) = self.state.topology.as_mut() {
            t.capacities = caps;
        }
        self.state.save()
    }

    /// One delay line per delayed link, in the router end, on a TUN device `dly-N` (N = link).
    /// What the router would send out on the link (its subnet and every subnet behind it) is
    /// routed into the TUN; what comes out is looked up in a table that forwards normally.
    fn start_delays(&mut self, mode: &DelayMode) -> Result<(), Error> {
        for (i, l) in self.topo.links.iter().enumerate() {
            if l.delay.is_none() && l.loss.is_none() {
                continue;
            }
            // Loss and delay share the link's line; each lossy link its own seed.
            let params = LineParams {
                delay: l.delay.unwrap_or_default(),
                loss: l.loss.clone(),
                seed: 1 + i as u64,
                reorder: None,
            };
            let r = self.topo.delay_end(i);
            let (ns, tun) = (self.ns(r), format!("dly-{i}"));
            match mode {
                DelayMode::Thread => {
                    let line = DelayLine::start_with(vec![ns.clone()], &tun, params)?;
                    self.delays.push((i, DelayRunner::Thread(line)));
                }
                DelayMode::Process { program, args } => {
                    let pid =
                        spawn_delay_process(program, args, &ns, &tun, &params, &self.name, i)?;
                    self.delays.push((i, DelayRunner::Process(pid)));
                    if let Some(t) = self.state.topology.as_mut() {
                        t.delay_pids.push(pid);
                    }
                    self.state.save()?;
                    wait_for_dev(&ns, &tun, pid)?;
                }
            }
            ip_batch(&ns, &delay_routes(&self.topo, i, r, &tun))?;
        }
        Ok(())
    }
}

impl Drop for TopoTestbed {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // Threads in the namespaces keep them alive: stop the delay lines first.
        for (_, d) in self.delays.drain(..) {
            if let DelayRunner::Thread(line) = d {
                line.stop();
            }
        }
        if let Err(e) = topology::teardown(&self.name) {
            eprintln!("mgrp testbed: teardown of {} incomplete: {e}", self.name);
        }
    }
}

/// A config that stands for the topology in places that know one bottleneck (status lists):
/// its tightest shaped link, or the default when nothing is shaped.
fn summary_config(t: &Topology) -> TestbedConfig {
    t.links
        .iter()
        .filter_map(|l| l.shaping.as_ref())
        .min_by_key(|s| s.capacity_bps)
        .map(|s| s.as_config())
        .unwrap_or_default()
}

/// Sysctls of one node: no IPv6 (no stray traffic), no reverse-path filter (the delay line's
/// TUN re-injects packets); routers forward and answer TTL expiry like routers.
fn sysctl_script(kind: NodeKind, icmp: IcmpRateLimit) -> String {
    let mut s = String::from(
        "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 \
         net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0\n",
    );
    if kind == NodeKind::Router {
        // Errors leave from the address of the interface the offending packet came in on, as
        // traceroute expects of a router (Linux's default uses the outgoing route's address;
        // on a tree the two are the same interface, this makes it explicit).
        s.push_str("sysctl -qw net.ipv4.ip_forward=1 net.ipv4.icmp_errors_use_inbound_ifaddr=1\n");
        if icmp == IcmpRateLimit::Off {
            // No per-destination token bucket, and a global budget no probe burst reaches.
            s.push_str(
                "sysctl -qw net.ipv4.icmp_ratelimit=0 net.ipv4.icmp_msgs_per_sec=1000000 \
                 net.ipv4.icmp_msgs_burst=1000000\n",
            );
        }
    }
    s
}

/// The counter device that sees a copy of the foreground arriving on `dev`.
pub fn fg_counter_dev(dev: &str) -> String {
    format!("fgc-{dev}")
}

/// Counting the foreground at the downstream end: this kernel has `u32` and the `mirred`
/// action but no `gact` (no `pass` action to count with), so u32 filters on the ingress
/// (clsact) mirror the foreground pair's packets, both ways, to a veth `fgc-DEV` whose transmit
/// counters are the foreground bytes (frames, the unit the shaper charges). Its peer `fgd-DEV`
/// has no address and drops the copies (they are not addressed to it).
pub(crate) fn fg_counter_scripts(dev: &str, a: String, b: String) -> (String, String) {
    let c = fg_counter_dev(dev);
    let ip = format!(
        "link add name {c} type veth peer name fgd-{dev}
link set dev {c} up
link set dev fgd-{dev} up
"
    );
    let f = |src: &str, dst: &str| {
        format!(
            "filter add dev {dev} ingress prio {FG_PRIO} protocol ip u32 \
             match ip src {src}/32 match ip dst {dst}/32 action mirred egress mirror dev {c}\n"
        )
    };
    let tc = format!("qdisc add dev {dev} clsact\n{}{}", f(&a, &b), f(&b, &a));
    (ip, tc)
}

/// Routes in router `r` that send link `link`'s traffic through TUN `tun`.
fn delay_routes(t: &Topology, link: usize, r: usize, tun: &str) -> String {
    let dev = t.dev(link, r);
    let src = t.addr(link, r);
    let mut s = format!(
        "link set dev {tun} up\nrule add iif {tun} lookup {DELAY_TABLE} pref 100\n\
         route add {net} dev {dev} table {DELAY_TABLE}\n\
         route replace {net} dev {tun} src {src}\n",
        net = t.subnet(link)
    );
    for r in t.routes(r).into_iter().filter(|x| x.dev == dev) {
        s.push_str(&format!(
            "route add {} via {} dev {dev} table {DELAY_TABLE}\nroute replace {} dev {tun} src {src}\n",
            r.dst, r.via, r.dst
        ));
    }
    s
}

fn spawn_delay_process(
    program: &std::path::Path,
    args: &[String],
    ns: &str,
    tun: &str,
    params: &LineParams,
    name: &str,
    link: usize,
) -> Result<u32, Error> {
    use std::os::unix::process::CommandExt;
    let dir = std::path::PathBuf::from(topology::STATE_DIR);
    let stats = dir.join(format!("{name}.delay-{link}.json"));
    let log = std::fs::File::create(dir.join(format!("{name}.delay-{link}.log")))
        .map_err(|e| Error::Setup(format!("create delay line log: {e}")))?;
    let log2 = log
        .try_clone()
        .map_err(|e| Error::Setup(format!("delay line log: {e}")))?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .args(["--ns", ns, "--dev", tun])
        .args(["--delay-ns", &params.delay.as_nanos().to_string()]);
    if let Some(m) = &params.loss {
        cmd.args(["--loss", &m.to_string()])
            .args(["--loss-seed", &params.seed.to_string()]);
    }
    let child = cmd
        .arg("--stats")
        .arg(&stats)
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log2)
        // Its own process group, so the terminal's Ctrl-C for `up` does not reach it.
        .process_group(0)
        .spawn()
        .map_err(|e| Error::Setup(format!("start delay line {program:?}: {e}")))?;
    Ok(child.id())
}

fn wait_for_dev(ns: &str, dev: &str, pid: u32) -> Result<(), Error> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while netns::run("ip", &["-n", ns, "link", "show", dev]).is_err() {
        if std::time::Instant::now() > deadline || !pid_alive(pid) {
            return Err(Error::Setup(format!(
                "the delay line process did not create {dev} in {ns}"
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn router_sysctls() {
        let off = sysctl_script(NodeKind::Router, IcmpRateLimit::Off);
        assert!(off.contains("icmp_ratelimit=0") && off.contains("ip_forward=1"));
        let kernel = sysctl_script(NodeKind::Router, IcmpRateLimit::Kernel);
        assert!(!kernel.contains("icmp_ratelimit") && kernel.contains("inbound_ifaddr=1"));
        let host = sysctl_script(NodeKind::Host, IcmpRateLimit::Off);
        assert!(!host.contains("ip_forward") && host.contains("disable_ipv6=1"));
    }

    #[test]
    fn delay_routes_cover_everything_behind_the_link() {
        let t = Topology::parse(
            "[[node]]\nname=\"a\"\nkind=\"host\"\n[[node]]\nname=\"r1\"\nkind=\"router\"\n\
             [[node]]\nname=\"r2\"\nkind=\"router\"\n[[node]]\nname=\"b\"\nkind=\"host\"\n\
             [[link]]\na=\"a\"\nb=\"r1\"\n[[link]]\na=\"r1\"\nb=\"r2\"\ndelay=\"5ms\"\n\
             [[link]]\na=\"r2\"\nb=\"b\"\n",
        )
        .unwrap();
        let r1 = t.index("r1").unwrap();
        assert_eq!(t.delay_end(1), r1);
        let s = delay_routes(&t, 1, r1, "dly-1");
        assert!(
            s.contains("route replace 198.18.1.0/24 dev dly-1 src 198.18.1.1"),
            "{s}"
        );
        assert!(
            s.contains("route add 198.18.2.0/24 via 198.18.1.2 dev r2 table 100"),
            "{s}"
        );
        assert!(s.contains("route replace 198.18.2.0/24 dev dly-1"), "{s}");
        assert!(
            !s.contains("198.18.0.0"),
            "a's subnet is not behind r1—r2: {s}"
        );
    }

    #[test]
    fn foreground_filters_both_ways() {
        let (ip, s) = fg_counter_scripts("r2", "198.18.0.2".into(), "198.18.3.2".into());
        assert!(
            ip.starts_with("link add name fgc-r2 type veth peer name fgd-r2\n"),
            "{ip}"
        );
        assert!(s.starts_with("qdisc add dev r2 clsact\n"));
        let m = "action mirred egress mirror dev fgc-r2";
        assert!(s.contains(&format!(
            "match ip src 198.18.0.2/32 match ip dst 198.18.3.2/32 {m}"
        )));
        assert!(s.contains(&format!(
            "match ip src 198.18.3.2/32 match ip dst 198.18.0.2/32 {m}"
        )));
    }
}
