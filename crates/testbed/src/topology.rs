//! Building and tearing down the namespace path.

use crate::capacity::{self, LinkCapacity, ShaperAt};
use crate::delayline::{DelayLine, DelayStats, LineParams, TUN_QUEUE_LEN};
use crate::generator::Endpoints;
use crate::loss::LossModel;
use crate::netns::{self, ip_batch, sh_in};
use crate::units::{parse_bytes, parse_duration};
use crate::Error;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Where state files of live testbeds are kept (tmpfs, like /run/netns, so both vanish on reboot).
pub const STATE_DIR: &str = "/run/mgrp/testbed";
/// Every namespace the testbed makes starts with this.
pub const NS_PREFIX: &str = "mgrp-";
/// Name of the delay line's TUN device inside its router.
pub const DELAY_DEV: &str = "dly";
/// Routing table the delay line's re-injected packets are looked up in.
const DELAY_TABLE: u32 = 100;
/// Port of the sink the capacity flood is sent to (below the generators' ports).
const CAPACITY_PORT: u16 = 5199;
/// Name of the loss line's TUN device inside r1.
pub const LOSS_DEV: &str = "lss";
/// Routing table the loss line's re-injected packets are looked up in.
const LOSS_TABLE: u32 = 101;
/// The measured flow's destination subnet (rcv's): what the loss line loses from.
const RCV_NET: &str = "198.18.3.0/24";
/// Ethernet frame of a full-MTU packet: what a shaper must be able to pass at once.
const MAX_FRAME: u64 = 1514;

/// The six hosts of the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Snd,
    Xsnd,
    R1,
    R2,
    Rcv,
    Xrcv,
}

impl Role {
    pub const ALL: [Role; 6] = [
        Role::Snd,
        Role::Xsnd,
        Role::R1,
        Role::R2,
        Role::Rcv,
        Role::Xrcv,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Snd => "snd",
            Role::Xsnd => "xsnd",
            Role::R1 => "r1",
            Role::R2 => "r2",
            Role::Rcv => "rcv",
            Role::Xrcv => "xrcv",
        }
    }

    /// The host's address (routers: their address on the bottleneck link). All addresses are in
    /// 198.18.0.0/15, the range set aside for benchmarking, and exist only inside the namespaces.
    pub fn addr(self) -> &'static str {
        match self {
            Role::Snd => "198.18.1.2",
            Role::Xsnd => "198.18.2.2",
            Role::R1 => "198.18.0.1",
            Role::R2 => "198.18.0.2",
            Role::Rcv => "198.18.3.2",
            Role::Xrcv => "198.18.4.2",
        }
    }
}

/// How much the bottleneck queue holds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Buffer {
    Packets(u32),
    Bytes(u64),
    /// As many bytes as the capacity drains in this time.
    Time(#[serde(with = "secs")] Duration),
}

mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_secs_f64(f64::deserialize(d)?))
    }
    pub mod opt {
        use super::*;
        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => s.serialize_some(&d.as_secs_f64()),
                None => s.serialize_none(),
            }
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            Ok(Option::<f64>::deserialize(d)?.map(Duration::from_secs_f64))
        }
    }
}

impl Buffer {
    /// `100p` packets, `50ms` of the capacity, or bytes (`64kb`, `30000b`).
    pub fn parse(s: &str) -> Result<Buffer, Error> {
        let t = s.trim().to_ascii_lowercase();
        let bad = || {
            Error::BadInput(format!(
                "bad buffer {s:?}: use packets (100p), time (50ms) or bytes (64kb)"
            ))
        };
        let b = if let Some(n) = t.strip_suffix('p') {
            Buffer::Packets(n.parse().map_err(|_| bad())?)
        } else if t.ends_with("ms") || t.ends_with("us") || (t.ends_with('s') && !t.ends_with("bs"))
        {
            Buffer::Time(parse_duration(&t).map_err(|_| bad())?)
        } else if t.ends_with('b') {
            Buffer::Bytes(parse_bytes(&t).map_err(|_| bad())?)
        } else {
            return Err(bad());
        };
        Ok(b)
    }

    /// The queue limit in bytes for a link of `capacity_bps`.
    pub fn bytes(self, capacity_bps: u64) -> u64 {
        match self {
            Buffer::Packets(n) => n as u64 * MAX_FRAME,
            Buffer::Bytes(b) => b,
            Buffer::Time(d) => (capacity_bps as f64 / 8.0 * d.as_secs_f64()).round() as u64,
        }
    }
}

/// The `tc` discipline that makes the bottleneck.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Shaper {
    /// HTB class at rate = ceil = capacity, with a pfifo/bfifo leaf holding the buffer.
    Htb,
    /// Token bucket filter; its burst must hold a full frame.
    Tbf,
}

/// Which direction the delay line delays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DelayDir {
    /// rcv → snd (and xrcv → xsnd): ACKs and reports; forward probe spacing untouched.
    Reverse,
    /// snd → rcv, before the bottleneck.
    Forward,
    /// Both directions; the round trip grows by twice the delay.
    Both,
}

/// What makes the delay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DelayImpl {
    /// `netem` where the kernel has it, else the TUN delay line.
    #[default]
    Auto,
    /// The kernel's `netem` qdisc (an error where the kernel lacks it).
    Netem,
    /// The project's own TUN delay line.
    Tun,
}

/// How the delay line runs: as a thread of this process (tests, `testbed run`), or as a
/// separate process that outlives it (`testbed up`). The process is started from the command
/// given, with `--ns NS --delay-ns N --stats FILE --dev DEV` appended, and for the loss line
/// also `--loss SPEC --loss-seed N`.
#[derive(Debug, Clone)]
pub enum DelayMode {
    Thread,
    Process { program: PathBuf, args: Vec<String> },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestbedConfig {
    /// Instance name; namespaces are `mgrp-NAME-ROLE`. `None` picks a unique one.
    pub name: Option<String>,
    pub capacity_bps: u64,
    pub buffer: Buffer,
    /// Shaper burst in bytes; `None` = max(100 B, 60 µs × C) for HTB (the shaper timer's
    /// lateness on this kind of VM, see [`TestbedConfig::burst`]), and one full frame more
    /// than that for TBF.
    pub burst_bytes: Option<u64>,
    pub shaper: Shaper,
    /// Extra one-way delay added by the delay line.
    #[serde(with = "secs::opt")]
    pub delay: Option<Duration>,
    pub delay_dir: DelayDir,
    #[serde(default)]
    pub delay_impl: DelayImpl,
    /// Flood the bottleneck once when it comes up and use the rate it really drains as the
    /// truth's capacity (see [`crate::capacity`]); off, the configured rate stands in.
    #[serde(default = "yes")]
    pub measure_capacity: bool,
    /// Loss on the measured flow's forward path, before the bottleneck (a TUN line in r1 for
    /// traffic toward rcv; cross traffic does not cross it). Runs with zero delay unless a
    /// forward delay is set too.
    #[serde(default)]
    pub loss: Option<LossModel>,
    /// Seed of the loss model's RNG: same seed, same losses.
    #[serde(default = "default_loss_seed")]
    pub loss_seed: u64,
}

fn yes() -> bool {
    true
}

fn default_loss_seed() -> u64 {
    1
}

impl Default for TestbedConfig {
    fn default() -> Self {
        TestbedConfig {
            name: None,
            capacity_bps: 20_000_000,
            buffer: Buffer::Packets(100),
            burst_bytes: None,
            shaper: Shaper::Htb,
            delay: None,
            delay_dir: DelayDir::Reverse,
            delay_impl: DelayImpl::Auto,
            measure_capacity: true,
            loss: None,
            loss_seed: default_loss_seed(),
        }
    }
}

impl TestbedConfig {
    /// The shaper's burst: enough tokens to cover its timer firing late, so that a train sent
    /// at C leaves at C. The testbed lessons' 20 µs × C (timers 10–30 µs late there) lost
    /// capacity here, where timers fire up to ~100 µs late: at 100 Mbit/s (250 B) 20-probe
    /// trains sent at C came out at 82 Mbit/s (median), the start flood read 89.9–98.9 within
    /// an hour, and direct-probing readings read 9–15 Mbit/s low; 60 µs × C (750 B) read the
    /// flood at 98–99.6 and the readings 0–4% above the truth (a bigger bucket lets a
    /// train's head through faster than C: +17–32% at 3 kB). `mgrp_lab`'s `phase_study`,
    /// docs/results/burst.md.
    pub fn burst(&self) -> u64 {
        let lessons = ((60e-6 * self.capacity_bps as f64 / 8.0).round() as u64).max(100);
        self.burst_bytes.unwrap_or(match self.shaper {
            Shaper::Htb => lessons,
            Shaper::Tbf => lessons + MAX_FRAME,
        })
    }

    /// Refuse what cannot work, with the reason.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::BadInput(m));
        if self.capacity_bps == 0 {
            return bad("capacity must be greater than 0 (e.g. 20mbit)".into());
        }
        if !(8_000..=10_000_000_000).contains(&self.capacity_bps) {
            return bad(format!(
                "capacity {} bit/s is out of range: the testbed shapes 8kbit ..= 10gbit",
                self.capacity_bps
            ));
        }
        if let Some(name) = &self.name {
            validate_name(name)?;
        }
        let limit = self.buffer.bytes(self.capacity_bps);
        if limit < MAX_FRAME {
            return bad(format!(
                "buffer of {limit} B cannot hold one {MAX_FRAME} B frame"
            ));
        }
        if limit > 1 << 30 {
            return bad(format!("buffer of {limit} B is absurd (more than 1 GiB)"));
        }
        let burst = self.burst();
        if burst == 0 || burst > 64 << 20 {
            return bad(format!(
                "burst of {burst} B is out of range (1 B ..= 64 MiB)"
            ));
        }
        if self.shaper == Shaper::Tbf && burst < MAX_FRAME {
            return bad(format!(
                "TBF drops frames larger than its burst: burst {burst} B must be at least {MAX_FRAME} B"
            ));
        }
        if let Some(d) = self.delay {
            if d > Duration::from_secs(10) {
                return bad("delay above 10 s is not supported".into());
            }
        }
        if let Some(m) = &self.loss {
            m.validate()
                .map_err(|e| Error::BadInput(format!("loss {m}: {e}")))?;
        }
        Ok(())
    }

    /// The `tc` batch that installs the bottleneck on r1's link toward r2.
    pub fn shaper_script(&self) -> String {
        self.shaper_script_on(Role::R2.as_str())
    }

    /// The `tc` batch that installs this shaper as the root qdisc of `dev`.
    pub fn shaper_script_on(&self, dev: &str) -> String {
        let c = self.capacity_bps;
        let burst = self.burst();
        let limit = self.buffer.bytes(c);
        match self.shaper {
            Shaper::Htb => {
                let leaf = match self.buffer {
                    Buffer::Packets(n) => format!("pfifo limit {n}"),
                    _ => format!("bfifo limit {limit}"),
                };
                format!(
                    "qdisc replace dev {dev} root handle 1: htb default 1\n\
                     class add dev {dev} parent 1: classid 1:1 htb rate {c}bit ceil {c}bit \
                     burst {burst}b cburst {burst}b quantum {MAX_FRAME}\n\
                     qdisc add dev {dev} parent 1:1 handle 10: {leaf}\n"
                )
            }
            Shaper::Tbf => {
                format!("qdisc replace dev {dev} root handle 1: tbf rate {c}bit burst {burst} limit {limit}\n")
            }
        }
    }
}

impl TestbedConfig {
    /// Where `netem` goes and the `tc` line for each place: the reverse path on r2's link
    /// toward r1; the forward path on the senders' own links, before the bottleneck (as the TUN
    /// line does), so the ground-truth counters after the bottleneck stay undelayed.
    pub fn netem_sites(&self, delay: Duration) -> Vec<(Role, String)> {
        let line = |dev: &str| {
            format!(
                "qdisc add dev {dev} root netem delay {}us limit 100000\n",
                delay.as_micros()
            )
        };
        let reverse = vec![(Role::R2, line("r1"))];
        let forward = vec![(Role::Snd, line("eth0")), (Role::Xsnd, line("eth0"))];
        match self.delay_dir {
            DelayDir::Reverse => reverse,
            DelayDir::Forward => forward,
            DelayDir::Both => [reverse, forward].concat(),
        }
    }
}

/// Instance names become part of namespace names: keep them short and plain.
pub fn validate_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= 24
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::BadInput(format!(
            "bad testbed name {name:?}: use 1-24 of a-z, 0-9 and '-', not starting with '-'"
        )))
    }
}

/// What is remembered about a live testbed, in `STATE_DIR/NAME.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    pub name: String,
    pub config: TestbedConfig,
    /// The process that owns the testbed and tears it down when it ends; `None` for one made by
    /// `testbed up`, which lives until `testbed down`.
    pub owner_pid: Option<u32>,
    /// The delay line's own process, if it runs as one.
    pub delay_pid: Option<u32>,
    /// The loss line's own process, if it runs as one.
    #[serde(default)]
    pub loss_pid: Option<u32>,
    /// What makes the delay (netem or tun), once it is in place.
    #[serde(default)]
    pub delay_impl: Option<DelayImpl>,
    /// The bottleneck's configured and measured capacity, once measured.
    #[serde(default)]
    pub capacity: Option<LinkCapacity>,
    pub created_unix_s: u64,
    /// Set for a testbed built from a topology file; `config` and `capacity` then describe its
    /// tightest shaped link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<crate::topo::TopoState>,
}

impl State {
    pub fn path(name: &str) -> PathBuf {
        PathBuf::from(STATE_DIR).join(format!("{name}.json"))
    }
    pub fn delay_stats_path(name: &str) -> PathBuf {
        PathBuf::from(STATE_DIR).join(format!("{name}.delay.json"))
    }
    pub fn delay_log_path(name: &str) -> PathBuf {
        PathBuf::from(STATE_DIR).join(format!("{name}.delay.log"))
    }
    pub fn loss_stats_path(name: &str) -> PathBuf {
        PathBuf::from(STATE_DIR).join(format!("{name}.loss.json"))
    }
    pub fn loss_log_path(name: &str) -> PathBuf {
        PathBuf::from(STATE_DIR).join(format!("{name}.loss.log"))
    }
    pub fn load(name: &str) -> Option<State> {
        serde_json::from_slice(&std::fs::read(Self::path(name)).ok()?).ok()
    }
    pub(crate) fn save(&self) -> Result<(), Error> {
        std::fs::create_dir_all(STATE_DIR)
            .map_err(|e| Error::Setup(format!("create {STATE_DIR}: {e}")))?;
        let tmp = Self::path(&format!("{}.tmp", self.name));
        std::fs::write(
            &tmp,
            serde_json::to_vec_pretty(self).expect("state serializes"),
        )
        .and_then(|_| std::fs::rename(&tmp, Self::path(&self.name)))
        .map_err(|e| Error::Setup(format!("write state file: {e}")))
    }
    /// Whether the owning process is gone (a crashed `run` or test).
    pub fn is_stale(&self) -> bool {
        self.owner_pid.is_some_and(|p| !pid_alive(p))
    }
}

/// Whether `pid` is running (a zombie waiting to be reaped is not).
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

fn ns_name(name: &str, role: Role) -> String {
    format!("{NS_PREFIX}{name}-{}", role.as_str())
}

/// The testbed instance a namespace belongs to: `mgrp-NAME-NODE` gives NAME. Node names (roles
/// and topology nodes) have no '-', so `mgrp-lab-2-a` belongs to `lab-2`, never to `lab`.
pub fn instance_of(ns: &str) -> Option<&str> {
    let (name, node) = ns.strip_prefix(NS_PREFIX)?.rsplit_once('-')?;
    let plain = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    };
    (plain(node) && validate_name(name).is_ok()).then_some(name)
}

enum DelayRunner {
    Thread(DelayLine),
    Process(u32),
}

/// Which of the testbed's TUN lines: the delay line or the loss line.
#[derive(Clone, Copy, PartialEq)]
enum LineKind {
    Delay,
    Loss,
}

/// Where a line runs: the router, the next hop its output is forwarded to, and the
/// destination subnets routed through it.
struct LineSite {
    role: Role,
    next_hop: &'static str,
    subnets: Vec<&'static str>,
}

impl LineKind {
    fn dev(self) -> &'static str {
        match self {
            LineKind::Delay => DELAY_DEV,
            LineKind::Loss => LOSS_DEV,
        }
    }
    fn table(self) -> u32 {
        match self {
            LineKind::Delay => DELAY_TABLE,
            LineKind::Loss => LOSS_TABLE,
        }
    }
    fn stats_path(self, name: &str) -> PathBuf {
        match self {
            LineKind::Delay => State::delay_stats_path(name),
            LineKind::Loss => State::loss_stats_path(name),
        }
    }
    fn log_path(self, name: &str) -> PathBuf {
        match self {
            LineKind::Delay => State::delay_log_path(name),
            LineKind::Loss => State::loss_log_path(name),
        }
    }
}

/// A live testbed. Dropping an owned one tears it down: namespaces (and with them every veth and
/// qdisc), the delay line, the state file.
pub struct Testbed {
    name: String,
    config: TestbedConfig,
    delay: Option<DelayRunner>,
    /// The loss line, if the config has loss.
    loss: Option<DelayRunner>,
    /// What actually makes the delay (netem or the TUN line), once started.
    delay_used: Option<DelayImpl>,
    capacity: LinkCapacity,
    owned: bool,
    /// CPUs held out of idle while this testbed is up ([`hold_cpus_awake`]).
    _awake: Option<mgrp_clock::cpu::AwakeCpus>,
}

/// Opt-out of [`hold_cpus_awake`]: set (to anything) to let CPUs idle while a testbed is up.
pub const ALLOW_IDLE_ENV: &str = "MGRP_TESTBED_ALLOW_IDLE";

/// Keep the host's CPUs out of idle states while a testbed this process built is up, so the
/// emulated link's shaper keeps time ([`mgrp_clock::cpu::AwakeCpus`]), unless
/// [`ALLOW_IDLE_ENV`] is set.
pub fn hold_cpus_awake() -> Option<mgrp_clock::cpu::AwakeCpus> {
    if std::env::var_os(ALLOW_IDLE_ENV).is_some() {
        return None;
    }
    mgrp_clock::cpu::hold_cpus_awake()
}

static NEXT_ID: AtomicU32 = AtomicU32::new(0);

impl Testbed {
    /// Build the path. Any failure part-way tears down what was made before returning the error.
    pub fn up(config: TestbedConfig, delay_mode: DelayMode) -> Result<Testbed, Error> {
        config.validate()?;
        netns::check_privileges()?;
        for t in ["ip", "tc", "ethtool"] {
            netns::tool(t)?;
        }
        let name = match &config.name {
            Some(n) => n.clone(),
            None => format!(
                "t{}-{}",
                std::process::id(),
                NEXT_ID.fetch_add(1, Ordering::Relaxed)
            ),
        };
        if Role::ALL.iter().any(|r| netns::exists(&ns_name(&name, *r)))
            || State::path(&name).exists()
        {
            return Err(Error::BadInput(format!(
                "a testbed named {name:?} already exists; `mgrp testbed down {name}` removes it"
            )));
        }
        let config = TestbedConfig {
            name: Some(name.clone()),
            ..config
        };
        // From here on, the guard's Drop cleans up whatever exists.
        let mut tb = Testbed {
            capacity: LinkCapacity::configured(config.capacity_bps as f64),
            delay_used: None,
            name: name.clone(),
            config,
            delay: None,
            loss: None,
            owned: true,
            // Before the capacity flood: the truth's C is what the link drains held awake.
            _awake: hold_cpus_awake(),
        };
        let state = State {
            name: name.clone(),
            config: tb.config.clone(),
            owner_pid: Some(std::process::id()),
            delay_pid: None,
            loss_pid: None,
            delay_impl: None,
            capacity: None,
            topology: None,
            created_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        };
        state.save()?;
        tb.build()?;
        if tb.config.measure_capacity {
            tb.capacity = tb.measure_capacity()?;
            if let Some(mut st) = State::load(&name) {
                st.capacity = Some(tb.capacity);
                st.save()?;
            }
        }
        let delay_mode = &delay_mode;
        if let Some(delay) = tb.config.delay {
            let netem = match tb.config.delay_impl {
                DelayImpl::Tun => false,
                DelayImpl::Netem => {
                    tb.start_netem(delay)?;
                    true
                }
                DelayImpl::Auto => tb.start_netem(delay).is_ok(),
            };
            let used = if netem {
                DelayImpl::Netem
            } else {
                let params = LineParams {
                    delay,
                    ..Default::default()
                };
                let sites = tb.delay_sites();
                tb.delay = Some(tb.start_line(LineKind::Delay, &sites, params, delay_mode)?);
                DelayImpl::Tun
            };
            tb.delay_used = Some(used);
            if let Some(mut st) = State::load(&name) {
                st.delay_impl = Some(used);
                st.save()?;
            }
        }
        if let Some(loss) = tb.config.loss.clone() {
            let params = LineParams {
                delay: Duration::ZERO,
                loss: Some(loss),
                seed: tb.config.loss_seed,
                reorder: None,
            };
            let sites = tb.loss_sites();
            tb.loss = Some(tb.start_line(LineKind::Loss, &sites, params, delay_mode)?);
        }
        Ok(tb)
    }

    /// A handle on an existing testbed made by another process; dropping it changes nothing.
    pub fn attach(name: &str) -> Result<Testbed, Error> {
        let state = State::load(name).ok_or_else(|| {
            Error::NotFound(format!(
                "no testbed named {name:?} (see `mgrp testbed status`)"
            ))
        })?;
        Ok(Testbed {
            capacity: state
                .capacity
                .unwrap_or(LinkCapacity::configured(state.config.capacity_bps as f64)),
            delay_used: state.delay_impl,
            name: name.into(),
            config: state.config,
            delay: None,
            loss: None,
            owned: false,
            _awake: None,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn config(&self) -> &TestbedConfig {
        &self.config
    }
    /// The bottleneck's configured and measured capacity.
    pub fn capacity(&self) -> LinkCapacity {
        self.capacity
    }

    /// Flood the bottleneck from xsnd to xrcv and measure what it drains while backlogged (as
    /// `up` does; again now, e.g. to see how the rate moved with the machine's load). Does not
    /// change [`capacity`](Self::capacity).
    pub fn measure_capacity(&self) -> Result<LinkCapacity, Error> {
        let at = ShaperAt {
            ns: self.ns(Role::R1),
            dev: Self::BOTTLENECK_DEV.into(),
        };
        let flood = Endpoints {
            src_ns: self.ns(Role::Xsnd),
            dst_ns: self.ns(Role::Xrcv),
            dst: format!("{}:{CAPACITY_PORT}", Role::Xrcv.addr())
                .parse()
                .expect("valid address"),
        };
        capacity::measure(&at, &flood, self.config.capacity_bps)
    }

    /// The namespace that plays `role`.
    pub fn ns(&self, role: Role) -> String {
        ns_name(&self.name, role)
    }

    /// Interface names on the routers, by what they connect to. r1's link toward r2 carries the
    /// bottleneck; r2's links toward rcv and xrcv count the two flows that left it.
    pub const BOTTLENECK_DEV: &'static str = "r2";

    fn build(&mut self) -> Result<(), Error> {
        let ns = |r: Role| ns_name(&self.name, r);
        let adds: String = Role::ALL
            .iter()
            .map(|r| format!("netns add {}\n", ns(*r)))
            .collect();
        netns::run_with_input("ip", &["-batch", "-"], Some(&adds))?;

        // Sysctls first, so links created afterwards inherit `default`.
        for r in Role::ALL {
            let mut s = String::from(
                "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1\n",
            );
            if matches!(r, Role::R1 | Role::R2) {
                s.push_str(
                    "sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 \
                     net.ipv4.conf.default.rp_filter=0\n",
                );
            }
            sh_in(&ns(r), &s)?;
        }

        // Links: each router-side end is named after the host it reaches; hosts have eth0.
        let veth = |local: &str, peer: &str, peer_ns: &str| {
            format!("link add {local} type veth peer name {peer} netns {peer_ns}\n")
        };
        ip_batch(
            &ns(Role::R1),
            &[
                veth("snd", "eth0", &ns(Role::Snd)),
                veth("xsnd", "eth0", &ns(Role::Xsnd)),
                veth("r2", "r1", &ns(Role::R2)),
            ]
            .concat(),
        )?;
        ip_batch(
            &ns(Role::R2),
            &[
                veth("rcv", "eth0", &ns(Role::Rcv)),
                veth("xrcv", "eth0", &ns(Role::Xrcv)),
            ]
            .concat(),
        )?;

        let host = |r: Role, gw: &str| {
            format!(
                "link set lo up\naddr add {}/24 dev eth0\nlink set eth0 up\nroute add default via {gw}\n",
                r.addr()
            )
        };
        ip_batch(&ns(Role::Snd), &host(Role::Snd, "198.18.1.1"))?;
        ip_batch(&ns(Role::Xsnd), &host(Role::Xsnd, "198.18.2.1"))?;
        ip_batch(&ns(Role::Rcv), &host(Role::Rcv, "198.18.3.1"))?;
        ip_batch(&ns(Role::Xrcv), &host(Role::Xrcv, "198.18.4.1"))?;
        ip_batch(
            &ns(Role::R1),
            "link set lo up\n\
             addr add 198.18.1.1/24 dev snd\nlink set snd up\n\
             addr add 198.18.2.1/24 dev xsnd\nlink set xsnd up\n\
             addr add 198.18.0.1/30 dev r2\nlink set r2 up\n\
             route add 198.18.3.0/24 via 198.18.0.2\nroute add 198.18.4.0/24 via 198.18.0.2\n",
        )?;
        ip_batch(
            &ns(Role::R2),
            "link set lo up\n\
             addr add 198.18.3.1/24 dev rcv\nlink set rcv up\n\
             addr add 198.18.4.1/24 dev xrcv\nlink set xrcv up\n\
             addr add 198.18.0.2/30 dev r1\nlink set r1 up\n\
             route add 198.18.1.0/24 via 198.18.0.1\nroute add 198.18.2.0/24 via 198.18.0.1\n",
        )?;

        // Per-packet timing is meaningless if the kernel coalesces packets: offloads off.
        for (r, devs) in [
            (Role::Snd, &["eth0"][..]),
            (Role::Xsnd, &["eth0"]),
            (Role::Rcv, &["eth0"]),
            (Role::Xrcv, &["eth0"]),
            (Role::R1, &["snd", "xsnd", "r2"]),
            (Role::R2, &["rcv", "xrcv", "r1"]),
        ] {
            let s: String = devs
                .iter()
                .map(|d| format!("ethtool -K {d} gso off tso off gro off 2>/dev/null || ethtool -K {d} gso off gro off\n"))
                .collect();
            sh_in(&ns(r), &s)?;
        }

        // veth does the receiver's work (forwarding, shaping, delivery) in the softirq of the
        // sending CPU: a probe's send() would take the whole path's time. Steer r1's receive
        // processing of probes to every CPU but the last, where the pacer pins itself.
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        if cpus >= 2 {
            let mask = (1u64 << (cpus.min(64) - 1)) - 1;
            sh_in(
                &ns(Role::R1),
                &format!("echo {mask:x} > /sys/class/net/snd/queues/rx-0/rps_cpus"),
            )?;
        }

        netns::run_with_input(
            "tc",
            &["-n", &ns(Role::R1), "-batch", "-"],
            Some(&self.config.shaper_script()),
        )?;
        Ok(())
    }

    /// The routers that host the delay line and the subnets whose traffic it delays.
    fn delay_sites(&self) -> Vec<LineSite> {
        let reverse = LineSite {
            role: Role::R2,
            next_hop: "198.18.0.1",
            subnets: vec!["198.18.1.0/24", "198.18.2.0/24"],
        };
        let forward = LineSite {
            role: Role::R1,
            next_hop: "198.18.0.2",
            subnets: vec![RCV_NET, "198.18.4.0/24"],
        };
        match self.config.delay_dir {
            DelayDir::Reverse => vec![reverse],
            DelayDir::Forward => vec![forward],
            DelayDir::Both => vec![reverse, forward],
        }
    }

    /// The loss line: in r1, for the measured flow toward rcv only, before the bottleneck, so
    /// a lost packet never loads the bottleneck and the ground truth (read after it) stays exact.
    fn loss_sites(&self) -> Vec<LineSite> {
        vec![LineSite {
            role: Role::R1,
            next_hop: "198.18.0.2",
            subnets: vec![RCV_NET],
        }]
    }

    /// Put `netem` in place; on failure remove what was added and say why.
    fn start_netem(&mut self, delay: Duration) -> Result<(), Error> {
        let sites = self.config.netem_sites(delay);
        for (i, (role, line)) in sites.iter().enumerate() {
            if let Err(e) =
                netns::run_with_input("tc", &["-n", &self.ns(*role), "-batch", "-"], Some(line))
            {
                for (r, l) in &sites[..i] {
                    let dev = l.split_whitespace().nth(3).unwrap_or("eth0");
                    let _ = netns::run(
                        "tc",
                        &["-n", &self.ns(*r), "qdisc", "del", "dev", dev, "root"],
                    );
                }
                return Err(Error::Setup(format!(
                    "netem is not usable in this kernel ({e}); use the TUN delay line (--delay-impl tun or auto)"
                )));
            }
        }
        Ok(())
    }

    /// What makes the delay, if there is one: `Netem` or `Tun` (never `Auto`).
    pub fn delay_impl_used(&self) -> Option<DelayImpl> {
        self.delay_used
    }

    /// Start a TUN line (thread or process) at `sites` and route the sites' subnets through
    /// it; what comes out is looked up in the line's own table, which forwards normally.
    fn start_line(
        &self,
        kind: LineKind,
        sites: &[LineSite],
        params: LineParams,
        mode: &DelayMode,
    ) -> Result<DelayRunner, Error> {
        let dev = kind.dev();
        let runner = match mode {
            DelayMode::Thread => DelayRunner::Thread(DelayLine::start_with(
                sites.iter().map(|s| self.ns(s.role)).collect(),
                dev,
                params.clone(),
            )?),
            DelayMode::Process { program, args } => {
                let mut cmd = std::process::Command::new(program);
                cmd.args(args);
                for s in sites {
                    cmd.args(["--ns", &self.ns(s.role)]);
                }
                cmd.args(["--delay-ns", &params.delay.as_nanos().to_string()]);
                cmd.args(["--stats", &kind.stats_path(&self.name).to_string_lossy()]);
                cmd.args(["--dev", dev]);
                if let Some(m) = &params.loss {
                    cmd.args(["--loss", &m.to_string()]);
                    cmd.args(["--loss-seed", &params.seed.to_string()]);
                }
                // Its output goes to a log beside the state: an inherited pipe would keep
                // whoever reads ours (a test, a script) waiting for the daemon to end.
                let log = std::fs::File::create(kind.log_path(&self.name))
                    .map_err(|e| Error::Setup(format!("create {dev} line log: {e}")))?;
                let log2 = log
                    .try_clone()
                    .map_err(|e| Error::Setup(format!("{dev} line log: {e}")))?;
                cmd.stdin(std::process::Stdio::null())
                    .stdout(log)
                    .stderr(log2);
                // Its own session, so the terminal's Ctrl-C for `up` does not reach it.
                use std::os::unix::process::CommandExt;
                cmd.process_group(0);
                let child = cmd
                    .spawn()
                    .map_err(|e| Error::Setup(format!("start {dev} line {program:?}: {e}")))?;
                // Recorded at once, so teardown finds it whatever happens next.
                let mut state = State::load(&self.name)
                    .ok_or_else(|| Error::Setup(format!("state file of {} vanished", self.name)))?;
                match kind {
                    LineKind::Delay => state.delay_pid = Some(child.id()),
                    LineKind::Loss => state.loss_pid = Some(child.id()),
                }
                state.save()?;
                // Wait for its TUN devices to appear.
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                for s in sites {
                    while netns::run("ip", &["-n", &self.ns(s.role), "link", "show", dev]).is_err()
                    {
                        if std::time::Instant::now() > deadline || !pid_alive(child.id()) {
                            return Err(Error::Setup(format!(
                                "the {dev} line process did not create its TUN device (see {})",
                                kind.log_path(&self.name).display()
                            )));
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
                DelayRunner::Process(child.id())
            }
        };
        // A forward TUN delay line in r1 comes after the loss line: the loss line hands rcv's
        // packets to it rather than straight to r2.
        let forward_delay_in_r1 = kind == LineKind::Loss
            && self.delay_used == Some(DelayImpl::Tun)
            && self.config.delay_dir != DelayDir::Reverse;
        let table = kind.table();
        for site in sites {
            let mut s =
                format!("link set {dev} txqueuelen {TUN_QUEUE_LEN} up\nrule add iif {dev} lookup {table} pref {table}\n");
            for net in &site.subnets {
                let onward = if forward_delay_in_r1 && site.role == Role::R1 {
                    format!("dev {DELAY_DEV}")
                } else {
                    format!("via {}", site.next_hop)
                };
                s.push_str(&format!("route add {net} {onward} table {table}\n"));
                s.push_str(&format!("route replace {net} dev {dev}\n"));
            }
            ip_batch(&self.ns(site.role), &s)?;
        }
        Ok(runner)
    }

    /// Statistics of the delay line so far, if it runs in this process or reports to a file.
    pub fn delay_stats(&self) -> Option<DelayStats> {
        match &self.delay {
            Some(DelayRunner::Thread(line)) => Some(line.stats()),
            _ => std::fs::read(State::delay_stats_path(&self.name))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok()),
        }
    }

    /// Statistics of the loss line so far (packets seen, lost, the achieved loss rate), if
    /// the testbed has loss and the line runs in this process or reports to a file.
    pub fn loss_stats(&self) -> Option<DelayStats> {
        self.config.loss.as_ref()?;
        match &self.loss {
            Some(DelayRunner::Thread(line)) => Some(line.stats()),
            _ => std::fs::read(State::loss_stats_path(&self.name))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok()),
        }
    }

    /// The delay line's process id, when it runs as its own process.
    pub fn delay_pid(&self) -> Option<u32> {
        match self.delay {
            Some(DelayRunner::Process(pid)) => Some(pid),
            _ => None,
        }
    }

    /// Leave the testbed standing after this process ends (`testbed up`); `teardown` removes it.
    pub fn persist(mut self) -> Result<(), Error> {
        if matches!(self.delay, Some(DelayRunner::Thread(_)))
            || matches!(self.loss, Some(DelayRunner::Thread(_)))
        {
            return Err(Error::Setup(
                "a delay or loss line running as a thread cannot outlive its process".into(),
            ));
        }
        let mut state = State::load(&self.name)
            .ok_or_else(|| Error::Setup(format!("state file of {} vanished", self.name)))?;
        state.owner_pid = None;
        state.save()?;
        self.owned = false;
        Ok(())
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // Threads in the namespaces keep them alive: stop the delay line first.
        if let Some(DelayRunner::Thread(line)) = self.delay.take() {
            line.stop();
        }
        if let Some(DelayRunner::Thread(line)) = self.loss.take() {
            line.stop();
        }
        if let Err(e) = teardown(&self.name) {
            eprintln!("mgrp testbed: teardown of {} incomplete: {e}", self.name);
        }
    }
}

/// What `teardown` removed.
#[derive(Debug, Default, Serialize)]
pub struct Removed {
    pub namespaces: Vec<String>,
    pub processes: Vec<u32>,
    pub state_file: bool,
}

/// Remove everything testbed `name` made, whether or not its owner is alive: the delay line
/// process it recorded (checked to be ours before it is signalled), its namespaces, its state.
pub fn teardown(name: &str) -> Result<Removed, Error> {
    validate_name(name)?;
    let mut removed = Removed::default();
    if let Some(state) = State::load(name) {
        let topo_pids = state.topology.iter().flat_map(|t| t.delay_pids.clone());
        let pids = [state.delay_pid, state.loss_pid].into_iter().flatten();
        for pid in pids.chain(topo_pids) {
            if stop_delay_process(pid, name) {
                removed.processes.push(pid);
            }
        }
    }
    // Every namespace of this instance, whatever its nodes (the default six or a topology's).
    let doomed = existing_namespaces(name);
    if !doomed.is_empty() {
        let script: String = doomed.iter().map(|n| format!("netns del {n}\n")).collect();
        // -force: carry on past one that vanished meanwhile.
        netns::run_with_input("ip", &["-force", "-batch", "-"], Some(&script))?;
    }
    removed.namespaces = doomed;
    removed.state_file = std::fs::remove_file(State::path(name)).is_ok();
    // The delay and loss lines' statistics and logs: NAME.delay.json, NAME.delay-3.log,
    // NAME.loss.json, ...
    let own = [format!("{name}.delay"), format!("{name}.loss")];
    for f in std::fs::read_dir(STATE_DIR).into_iter().flatten().flatten() {
        let file = f.file_name().to_string_lossy().into_owned();
        if own.iter().any(|o| file.starts_with(o.as_str())) {
            let _ = std::fs::remove_file(f.path());
        }
    }
    Ok(removed)
}

/// SIGTERM, then SIGKILL, a delay (or loss) line process — only if its command line says it is
/// a line of this testbed (the pid may have been reused since).
fn stop_delay_process(pid: u32, name: &str) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmdline = String::from_utf8_lossy(&cmdline);
    // The delay line runs in routers of this testbed: `delayline --ns mgrp-NAME-NODE`.
    let args: Vec<&str> = cmdline.split('\0').collect();
    let ours = args
        .windows(2)
        .any(|w| w[0] == "--ns" && instance_of(w[1]) == Some(name));
    if !(cmdline.contains("delayline") && ours) {
        return false;
    }
    use nix::sys::signal::{kill, Signal};
    let p = nix::unistd::Pid::from_raw(pid as i32);
    let _ = kill(p, Signal::SIGTERM);
    for _ in 0..100 {
        // Reap it if it is our child; otherwise just watch /proc.
        let _ = nix::sys::wait::waitpid(p, Some(nix::sys::wait::WaitPidFlag::WNOHANG));
        if !pid_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = kill(p, Signal::SIGKILL);
    let _ = nix::sys::wait::waitpid(p, None);
    true
}

/// Names of all testbeds: from state files and from namespaces left without one.
pub fn list_testbeds() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(STATE_DIR)
        .map(|d| {
            d.filter_map(|e| {
                let f = e.ok()?.file_name().into_string().ok()?;
                let n = f.strip_suffix(".json")?;
                // Testbed names have no '.': skip NAME.delay.json, NAME.loss.json, NAME.tmp.json.
                (!n.contains('.')).then(|| n.to_string())
            })
            .collect()
        })
        .unwrap_or_default();
    for ns in netns::list() {
        if let Some(name) = instance_of(&ns) {
            if !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
    }
    names.sort();
    names
}

/// The namespaces of testbed `name` that exist now.
pub fn existing_namespaces(name: &str) -> Vec<String> {
    netns::list()
        .into_iter()
        .filter(|ns| instance_of(ns) == Some(name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_belong_to_exactly_one_instance() {
        assert_eq!(instance_of("mgrp-lab-r1"), Some("lab"));
        assert_eq!(instance_of("mgrp-lab-2-a"), Some("lab-2"));
        assert_eq!(instance_of("mgrp-t123-4-x1s"), Some("t123-4"));
        assert_eq!(instance_of("mgrp-lab"), None);
        assert_eq!(instance_of("other-lab-r1"), None);
        assert_eq!(instance_of("mgrp-lab-R1"), None);
    }

    #[test]
    fn buffers() {
        assert_eq!(Buffer::parse("100p").unwrap(), Buffer::Packets(100));
        assert_eq!(
            Buffer::parse("50ms").unwrap(),
            Buffer::Time(Duration::from_millis(50))
        );
        assert_eq!(Buffer::parse("64kb").unwrap(), Buffer::Bytes(65536));
        assert_eq!(
            Buffer::Time(Duration::from_millis(50)).bytes(20_000_000),
            125_000
        );
        assert!(Buffer::parse("lots").is_err());
    }

    #[test]
    fn burst_follows_the_lessons_rule() {
        let c = |mbit: u64, shaper| TestbedConfig {
            capacity_bps: mbit * 1_000_000,
            shaper,
            ..Default::default()
        };
        assert_eq!(c(1, Shaper::Htb).burst(), 100);
        assert_eq!(c(20, Shaper::Htb).burst(), 150);
        assert_eq!(c(100, Shaper::Htb).burst(), 750);
        assert_eq!(c(1000, Shaper::Htb).burst(), 7500);
        assert_eq!(c(100, Shaper::Tbf).burst(), 750 + 1514);
    }

    #[test]
    fn validation_explains() {
        let bad = |cfg: TestbedConfig, why: &str| {
            let e = cfg.validate().unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        };
        bad(
            TestbedConfig {
                capacity_bps: 0,
                ..Default::default()
            },
            "greater than 0",
        );
        bad(
            TestbedConfig {
                capacity_bps: 100,
                ..Default::default()
            },
            "out of range",
        );
        bad(
            TestbedConfig {
                buffer: Buffer::Bytes(100),
                ..Default::default()
            },
            "cannot hold",
        );
        bad(
            TestbedConfig {
                shaper: Shaper::Tbf,
                burst_bytes: Some(500),
                ..Default::default()
            },
            "TBF",
        );
        bad(
            TestbedConfig {
                name: Some("Bad Name".into()),
                ..Default::default()
            },
            "bad testbed name",
        );
        assert!(TestbedConfig::default().validate().is_ok());
    }

    #[test]
    fn netem_placement() {
        let d = Duration::from_millis(20);
        let rev = TestbedConfig::default().netem_sites(d);
        assert_eq!(
            rev,
            vec![(
                Role::R2,
                "qdisc add dev r1 root netem delay 20000us limit 100000\n".to_string()
            )]
        );
        let both = TestbedConfig {
            delay_dir: DelayDir::Both,
            ..Default::default()
        }
        .netem_sites(d);
        let roles: Vec<Role> = both.iter().map(|(r, _)| *r).collect();
        assert_eq!(roles, vec![Role::R2, Role::Snd, Role::Xsnd]);
    }

    #[test]
    fn shaper_scripts() {
        let htb = TestbedConfig::default().shaper_script();
        assert!(
            htb.contains("htb rate 20000000bit ceil 20000000bit burst 150b cburst 150b"),
            "{htb}"
        );
        assert!(htb.contains("pfifo limit 100"), "{htb}");
        let tbf = TestbedConfig {
            shaper: Shaper::Tbf,
            buffer: Buffer::Time(Duration::from_millis(10)),
            ..Default::default()
        }
        .shaper_script();
        assert!(
            tbf.contains("tbf rate 20000000bit burst 1664 limit 25000"),
            "{tbf}"
        );
    }
}
