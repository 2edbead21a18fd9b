"""Simulated machines for the systemd e2e: each is a network namespace on a bridge (its own address and
default route) plus private mount, UTS and PID namespaces, with /etc, /var/lib and /opt overlaid so its
/etc/pyk8s and /var/lib/pyk8s are its own, a tmpfs /run, its hostname, and the repository at /opt/pyk8s.
Units run as systemd would run them: ExecStart with the EnvironmentFile's words, in WorkingDirectory,
restarted after it exits (Restart=always), since systemd is not PID 1 here."""

from __future__ import annotations

import configparser
import contextlib
import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import REPO

UNITS = REPO / "deploy" / "systemd"
RESTART_SEC = 1.0


def ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True)


def read_env(path: Path) -> dict[str, str]:
    """systemd's EnvironmentFile: NAME=value lines, quotes removed, comments skipped."""
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        words = shlex.split(value)
        env[name.strip()] = " ".join(words)
    return env


def unit_command(unit: str, etc: Path) -> tuple[list[str], str]:
    """(argv, working directory) of a unit's ExecStart as systemd expands it: `$NAME` becomes the words
    of NAME from the EnvironmentFile (read from the machine's `etc`, its /etc/pyk8s seen from the host)."""
    parser = configparser.RawConfigParser(strict=False)
    parser.optionxform = str  # type: ignore[assignment, method-assign]
    parser.read_string((UNITS / f"{unit}.service").read_text().replace("\\\n", " "))
    service = parser["Service"]
    env = read_env(etc / Path(service["EnvironmentFile"]).relative_to("/etc/pyk8s"))
    argv: list[str] = []
    for word in shlex.split(service["ExecStart"]):
        if word.startswith("$") and not word.startswith("${"):
            argv += env.get(word[1:], "").split()
        else:
            argv.append(word)
    return argv, service.get("WorkingDirectory", "/")


@dataclass
class Unit:
    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    stopping: bool = False
    thread: threading.Thread | None = None


@dataclass
class Machine:
    name: str
    address: str
    root: Path
    netns: str
    host_link: str
    init: subprocess.Popen[bytes] | None = None
    pid: int = 0
    units: dict[str, Unit] = field(default_factory=dict)

    @property
    def etc(self) -> Path:
        """The machine's /etc/pyk8s, from the host."""
        return self.root / "etc.upper" / "pyk8s"

    @property
    def var(self) -> Path:
        """The machine's /var/lib/pyk8s, from the host."""
        return self.root / "var-lib-pyk8s"

    def enter(self, argv: list[str], cwd: str = "/opt/pyk8s") -> list[str]:
        return ["nsenter", "-t", str(self.pid), "-m", "-u", "-p", "-n", "env", "-C", cwd, *argv]

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.enter(list(argv)), capture_output=True, text=True, timeout=timeout)

    def popen(self, argv: list[str], log: Path, cwd: str = "/opt/pyk8s") -> subprocess.Popen[bytes]:
        out = open(log, "ab")  # noqa: SIM115 - handed to the child
        return subprocess.Popen(self.enter(argv, cwd), stdout=out, stderr=subprocess.STDOUT)

    def start_unit(self, unit: str) -> Unit:
        """The unit's ExecStart, restarted RESTART_SEC after each exit until the machine stops."""
        argv, cwd = unit_command(unit, self.etc)
        state = Unit(unit, argv, self.root / f"{unit}.log")

        def supervise() -> None:
            while not state.stopping:
                state.starts += 1
                state.proc = self.popen(argv, state.log, cwd)
                state.proc.wait()
                if not state.stopping:
                    time.sleep(RESTART_SEC)

        state.thread = threading.Thread(target=supervise, name=f"{self.name}/{unit}", daemon=True)
        state.thread.start()
        self.units[unit] = state
        return state

    def boot(self, bridge: str, gateway: str, prefix: int) -> None:
        """Network, then namespaces and mounts; `self.pid` is the machine's PID 1 seen from the host."""
        ip("netns", "add", self.netns)
        ip("link", "add", self.host_link, "type", "veth", "peer", "name", "eth0", "netns", self.netns)
        ip("link", "set", self.host_link, "master", bridge, "up")
        for args in (("link", "set", "lo", "up"), ("addr", "add", f"{self.address}/{prefix}", "dev", "eth0"),
                     ("link", "set", "eth0", "up"), ("route", "add", "default", "via", gateway)):
            ip("-n", self.netns, *args)
        self.root.mkdir(parents=True, exist_ok=True)
        self.var.mkdir(exist_ok=True)
        mounts = [f"mkdir -p {self.root}/{d}.upper {self.root}/{d}.work && mount -t overlay overlay -o "
                  f"lowerdir=/{d.replace('-', '/')},upperdir={self.root}/{d}.upper,workdir={self.root}/{d}.work "
                  f"/{d.replace('-', '/')}" for d in ("etc", "var-lib", "opt")]
        script = " && ".join([
            "mount --make-rprivate /", *mounts,
            f"mkdir -p /var/lib/pyk8s /opt/pyk8s /etc/pyk8s && mount --bind {self.var} /var/lib/pyk8s",
            f"mount --bind {REPO} /opt/pyk8s", "mount -t tmpfs tmpfs /run", f"hostname {self.name}",
            "exec sleep infinity"])
        log = open(self.root / "machine.log", "ab")  # noqa: SIM115 - handed to the child
        self.init = subprocess.Popen(
            ["nsenter", f"--net=/var/run/netns/{self.netns}", "unshare", "--mount", "--uts", "--pid", "--fork",
             "--mount-proc", "sh", "-c", script], stdout=log, stderr=log)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                children = Path(f"/proc/{self.init.pid}/task/{self.init.pid}/children").read_text().split()
                if children and Path(f"/proc/{children[0]}/comm").read_text().strip() == "sleep":
                    self.pid = int(children[0])
                    return
            if self.init.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"machine {self.name} did not boot: {(self.root / 'machine.log').read_text()}")

    def shutdown(self) -> None:
        """Everything in the PID namespace dies with its PID 1; the mounts go with the last process."""
        for unit in self.units.values():
            unit.stopping = True
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        if self.init is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.init.wait(10)
        for unit in self.units.values():
            if unit.thread is not None:
                unit.thread.join(10)
        ip("netns", "delete", self.netns, check=False)
        ip("link", "delete", self.host_link, check=False)
