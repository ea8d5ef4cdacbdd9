"""The live testbed for the client's tests: a namespace testbed built with the project's own
`mgrp` binary, an agent in the receiver's namespace, an agent with the service (HTTP API,
a schedule on the path to the receiver) in the sender's namespace.

The API listens inside the sender's namespace, so the test process's main thread enters that
namespace (setns) for the session: every client socket it opens is then inside it, `127.0.0.1`
is the agent's loopback (no token needed) and `198.18.1.2`, the sender's own address, is not
loopback (token required). Helper processes (cross traffic, teardown) run in the namespace the
session started in.

Needs root (namespaces, qdiscs). Without root the live tests fail with a message saying so;
deselect them with `-m "not live"` to run the offline tests alone.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, List, Optional

import pytest

from mgrp_client import Client, MgrpError

_HERE = Path(__file__).resolve()
REPO = _HERE.parents[3] if len(_HERE.parents) > 3 else _HERE.parent  # clients/python/tests/..
CAPACITY_BPS = 20_000_000
PEER = "198.18.3.2"  # the receiver (Role::Rcv)
SND_ADDR = "198.18.1.2"  # the sender (Role::Snd): a non-loopback address of the API's host
HTTP_PORT = 7241
CLONE_NEWNET = 0x40000000


_LIBC = None if hasattr(os, "setns") else ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    """Move the calling thread into the network namespace open at `fd`."""
    if _LIBC is None:  # Python 3.12+
        os.setns(fd, CLONE_NEWNET)  # type: ignore[attr-defined]
        return
    if _LIBC.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def _mgrp_bin() -> Path:
    b = Path(os.environ.get("MGRP_BIN") or REPO / "target" / "release" / "mgrp")
    if not b.is_file() or not os.access(b, os.X_OK):
        pytest.fail(
            f"no mgrp binary at {b}: build it with `cargo build --release -p mgrp-cli` "
            "(in the repository root) or point MGRP_BIN at one",
            pytrace=False,
        )
    return b


class Proc:
    """A process we started, ended by its pid only: SIGTERM, then SIGKILL after a bound."""

    def __init__(self, name: str, popen: "subprocess.Popen[bytes]", log: Path) -> None:
        self.name = name
        self.popen = popen
        self.log = log

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, n: int = 30) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def stop(self, grace: float = 5.0) -> None:
        if self.popen.poll() is not None:
            return
        try:
            os.kill(self.popen.pid, signal.SIGTERM)
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.kill(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=5)
        except ProcessLookupError:
            pass


class Live:
    """The running testbed and agents; see the module's doc."""

    def __init__(self) -> None:
        self.bin = _mgrp_bin()
        self.name = f"py{os.getpid()}"
        self.snd_ns = f"mgrp-{self.name}-snd"
        self.rcv_ns = f"mgrp-{self.name}-rcv"
        self.peer = PEER
        self.capacity_bps = CAPACITY_BPS
        self.url = f"http://127.0.0.1:{HTTP_PORT}"
        self.ext_url = f"http://{SND_ADDR}:{HTTP_PORT}"
        self.token = secrets.token_hex(16)
        self.key = secrets.token_hex(32)
        self.dir = Path(tempfile.mkdtemp(prefix=f"mgrp-pyclient-{self.name}-"))
        self.procs: List[Proc] = []
        self._tb_up = False
        self._home_ns: Optional[int] = None  # fd of the namespace the session started in
        self._in_snd = False
        self._awake: Optional[int] = None  # fd of our PM QoS request (see _hold_cpus_awake)

    # -- processes ----------------------------------------------------------------------------

    def _preexec(self) -> Optional[Callable[[], None]]:
        """Children start in the session's own namespace, not the sender's."""
        if not self._in_snd or self._home_ns is None:
            return None
        fd = self._home_ns
        return lambda: _setns(fd)

    def run(self, *args: str, timeout: float = 30.0) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(
            [str(self.bin), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=self._preexec(),
        )

    def spawn(self, name: str, argv: List[str]) -> Proc:
        log = self.dir / f"{name}.log"
        env = dict(os.environ, MGRP_KEY=self.key)
        with open(log, "wb") as f:
            p = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=f,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=self._preexec(),
            )
        proc = Proc(name, p, log)
        self.procs.append(proc)
        return proc

    def agent(self, ns: str, name: str, *extra: str) -> Proc:
        return self.spawn(
            name,
            ["ip", "netns", "exec", ns, str(self.bin), "agent", "--no-api", "--stats-every", "0", *extra],
        )

    def cross(self, rate: str, seconds: int) -> Proc:
        """Cross traffic on the bottleneck (xsnd -> xrcv), CBR at `rate`, for `seconds`."""
        return self.spawn(
            f"cross-{rate}",
            [
                str(self.bin), "testbed", "run", "--on", self.name, "--cross", f"cbr:{rate}",
                "--duration", f"{seconds}s", "--pings", "0", "--json",
            ],
        )

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        if os.geteuid() != 0:
            pytest.fail(
                "the live tests need root: they build network namespaces and run agents in them "
                "(run clients/python/run-tests.sh as root, or deselect them with -m 'not live')",
                pytrace=False,
            )
        for tool in ("ip", "tc"):
            if shutil.which(tool) is None:
                pytest.fail(f"the live tests need `{tool}` (iproute2) on PATH", pytrace=False)
        self._hold_cpus_awake()
        up = self.run("testbed", "up", "--name", self.name, "--capacity", "20mbit")
        self._tb_up = True  # even a half-built testbed is torn down
        if up.returncode != 0:
            pytest.fail(f"`mgrp testbed up --name {self.name}` failed:\n{up.stderr}{up.stdout}", pytrace=False)
        token_file = self.dir / "token"
        token_file.write_text(self.token + "\n")
        token_file.chmod(0o600)
        cfg = self.dir / "agent.toml"
        cfg.write_text(
            f'store = ":memory:"\n'
            f'http = "0.0.0.0:{HTTP_PORT}"\n'
            f'token_file = "{token_file}"\n'
            "[[path]]\n"
            f'peer = "{self.peer}"\n'
            'method = "auto"\n'
            'every = "1s"\n'
            # Enough that the budget never holds the tests up (auto spends ~1 MB a measurement).
            'budget = "500mb"\n'
        )
        self.rcv = self.agent(self.rcv_ns, "agent-rcv")
        self.snd = self.agent(self.snd_ns, "agent-snd", "--config", str(cfg))
        # From here on this thread's sockets live in the sender's namespace.
        self._home_ns = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
        with open(f"/run/netns/{self.snd_ns}", "rb") as f:
            _setns(f.fileno())
        self._in_snd = True
        self._wait_api()

    def _hold_cpus_awake(self) -> None:
        """Hold a PM QoS request of 0 µs (no CPU idles deeper than polling) for the session, as
        the Rust tests' testbeds do (docs/testbed.md, "CPUs held awake"): `mgrp testbed up`
        outlives its process, so its testbed is not held. Free to idle, a halted vCPU's shaper
        timer fires late. This fixture's schedule (`auto` every 1 s, idle 20 Mbit/s path), 60 s
        each way, alternated twice: held, rounds ran 0.76/0.83 s at the median (slowest 2.8 s)
        and read 19.4/19.2 Mbit/s; free to idle 1.42/1.16 s and 17.5/18.2 Mbit/s; and in one
        noisy hour free to idle, single rounds took up to 9 s."""
        try:
            fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
        except OSError:
            return  # no PM QoS device: the tests run, as the Rust ones do
        try:
            os.write(fd, struct.pack("i", 0))  # native-endian s32, as the kernel reads it
        except OSError:
            os.close(fd)
            return
        self._awake = fd

    def _wait_api(self, bound: float = 15.0) -> None:
        c = self.client()
        t0 = time.monotonic()
        while True:
            for p in (self.rcv, self.snd):
                if not p.alive():
                    pytest.fail(f"{p.name} exited ({p.popen.returncode}):\n{p.tail()}", pytrace=False)
            try:
                c.schedules()
                return
            except MgrpError as e:
                if time.monotonic() - t0 > bound:
                    pytest.fail(f"the agent's API did not answer within {bound} s: {e}\n{self.snd.tail()}", pytrace=False)
            time.sleep(0.05)

    def client(self, **kw: object) -> Client:
        return Client(self.url, timeout=20.0, **kw)  # type: ignore[arg-type]

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.tail()}" for p in self.procs) + self.schedule_state()

    def schedule_state(self, seconds: float = 60.0) -> str:
        """The schedule's counters and last error, and its avail_bw estimates of the last
        `seconds` (when each ended, how long it ran, what it read): why events did not come."""
        try:
            c = self.client()
            out = ["--- schedules ---", *(repr(s) for s in c.schedules())]
            now = time.time_ns()
            recs = c.records(peer=self.peer, from_ns=now - int(seconds * 1e9))
            out.append(f"--- avail_bw estimates of the last {seconds:.0f} s (age s, ran s, Mbit/s, method) ---")
            out += [
                f"{(now - r.t_ns) / 1e9:6.1f} {r.elapsed_s:5.2f} {r.value / 1e6:6.2f} {r.method}" for r in recs
            ]
            return "\n" + "\n".join(out)
        except Exception as e:  # diagnostics only: never hide the failure they explain
            return f"\n(schedule state unavailable: {e})"

    def stop(self) -> None:
        errors: List[str] = []
        if self._in_snd and self._home_ns is not None:
            try:
                _setns(self._home_ns)
                self._in_snd = False
            except OSError as e:
                errors.append(f"back to the original namespace: {e}")
        for p in reversed(self.procs):
            try:
                p.stop()
            except Exception as e:  # keep tearing down
                errors.append(f"stopping {p.name} (pid {p.popen.pid}): {e}")
        if self._tb_up:
            try:
                down = self.run("testbed", "down", self.name)
                if down.returncode != 0:
                    errors.append(f"mgrp testbed down {self.name}: {down.stderr}")
            except Exception as e:
                errors.append(f"mgrp testbed down {self.name}: {e}")
        if self._home_ns is not None:
            os.close(self._home_ns)
            self._home_ns = None
        if self._awake is not None:
            os.close(self._awake)  # closing withdraws the request
            self._awake = None
        shutil.rmtree(self.dir, ignore_errors=True)
        if errors:
            raise RuntimeError("teardown: " + "; ".join(errors))


@pytest.fixture(scope="session")
def live() -> Iterator[Live]:
    """The testbed with both agents, up for the session, torn down even on failure."""
    lv = Live()
    old_term = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt("SIGTERM")  # so that the teardown below runs

    signal.signal(signal.SIGTERM, on_term)
    try:
        lv.start()
        yield lv
    finally:
        try:
            lv.stop()
        finally:
            signal.signal(signal.SIGTERM, old_term)


def per_cpu_steal_s() -> List[float]:
    """Seconds the hypervisor stole from each CPU so far (/proc/stat, USER_HZ ticks); empty
    where it cannot be read."""
    try:
        with open("/proc/stat") as f:
            lines = [l.split() for l in f if l.startswith("cpu") and not l.startswith("cpu ")]
        return [int(l[8]) / 100.0 for l in lines]
    except (OSError, IndexError, ValueError):
        return []


# The Rust tests' rule (mgrp_testbed::stolen): a wait is disturbed when some CPU lost at least
# 20 ms and 0.2% of it to steal. A quiet VM of this kind accrues ~0.05% per CPU; in its bursts
# the agents themselves wait for CPU (a rehearsal on 2026-11-25: 8.5 s of 53 s stolen from one CPU).
STOLEN_MIN_S, STOLEN_SHARE = 0.02, 0.002
FIRST_ESTIMATES_S = 20
# While steal is measured, the wait for the first estimates goes on up to this long.
FIRST_ESTIMATES_STOLEN_S = 60


@pytest.fixture(scope="session")
def warm(live: Live) -> Live:
    """The live testbed once the schedule has stored its first estimates."""
    c = live.client()
    t0 = time.monotonic()
    steal0 = per_cpu_steal_s()
    want = {"avail_bw", "capacity"}
    while True:
        have = {p.metric for p in c.paths()}
        if want <= have:
            return live
        waited = time.monotonic() - t0
        if waited > FIRST_ESTIMATES_S:
            lost = max((b - a for a, b in zip(steal0, per_cpu_steal_s())), default=0.0)
            stolen = lost >= STOLEN_MIN_S and lost >= STOLEN_SHARE * waited
            if not stolen or waited > FIRST_ESTIMATES_STOLEN_S:
                pytest.fail(
                    f"no {want - have} estimates within {waited:.0f} s (up to {lost:.2f} s stolen "
                    f"from one CPU); /v1/paths: {c.paths()}\n{live.logs()}",
                    pytrace=False,
                )
        time.sleep(0.1)
