"""Run the cluster as detached local processes: start in dependency order, stop by pid, report status."""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
import ssl
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import httpx

from deploy.bootstrap import ADMIN, apiserver_hosts, ensure_pki, write_kubeconfig
from deploy.processes import SPECS, ProcessSpec, State, child_env, free_port, port_in_use

POLL = 0.05
STOP_TIMEOUT = 10.0
LOG_TAIL_LINES = 25


class UpError(Exception):
    """A component did not become ready; the message carries the tail of its log."""


@dataclass(frozen=True)
class ProcessStatus:
    spec: ProcessSpec
    pid: int | None
    running: bool
    ready: bool


def enabled_specs(state: State) -> list[ProcessSpec]:
    return [spec for spec in SPECS if spec.enabled(state)]


def _proc_alive(pid: int, state: State) -> bool:
    """True if `pid` runs and its command line names our state dir, so a recycled pid is not ours."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
        return False
    return str(state.root).encode() in cmdline


def running_pid(state: State, name: str) -> int | None:
    try:
        pid = int(state.pid_file(name).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _proc_alive(pid, state) else None


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(log is empty)"


def _tls_context(state: State) -> ssl.SSLContext:
    """Trust our CA and present the admin cert, so probes work whether or not anonymous access is on."""
    ctx = ssl.create_default_context(cafile=state.pki.ca[0])
    ctx.load_cert_chain(*state.pki.client(ADMIN))
    return ctx


async def probe(http: httpx.AsyncClient, url: str) -> bool:
    try:
        response = await http.get(url, timeout=2.0)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def _assign_ports(state: State, port: int | None, etcd_servers: list[str] | None) -> None:
    """Pick etcd's ports once and keep them; re-pick only if another program took them meanwhile."""
    s = state.settings
    if port is not None:
        s.port = port
    if etcd_servers is not None:
        s.etcd_servers = etcd_servers
    for spec in SPECS:
        if spec.health_port and running_pid(state, spec.name) is None:
            current = s.component_ports.get(spec.name)
            if not current or port_in_use(current):
                s.component_ports[spec.name] = free_port()
    if state.external_etcd or running_pid(state, "etcd") is not None:
        return
    if not s.etcd_client_port or port_in_use(s.etcd_client_port):
        s.etcd_client_port = free_port()
    if not s.etcd_peer_port or port_in_use(s.etcd_peer_port) or s.etcd_peer_port == s.etcd_client_port:
        s.etcd_peer_port = free_port()


def _check_ports(state: State, specs: Iterable[ProcessSpec]) -> None:
    clashes = [
        f"{spec.name} cannot listen on 127.0.0.1:{port}: another program uses it"
        for spec in specs
        if running_pid(state, spec.name) is None
        for port in spec.listens(state)
        if port_in_use(port)
    ]
    if clashes:
        raise UpError("\n".join([*clashes, "(pyk8s up --port N moves the apiserver)"]))


def _launch(state: State, spec: ProcessSpec) -> subprocess.Popen[bytes]:
    """Start detached (own session, output to its log) so it outlives this command.

    asyncio's subprocess transport kills a still-running child when it is closed, which is the opposite
    of what a daemon needs; Popen with start_new_session only forks and returns.
    """
    try:
        argv = spec.argv(state)
    except OSError as error:
        raise UpError(f"{spec.name} could not start: {error}") from None
    log_path = state.log_file(spec.name)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    state.pid_file(spec.name).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        stamp = datetime.datetime.now().isoformat(timespec="seconds")
        log.write(f"--- pyk8s up {stamp}: {' '.join(argv)}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=state.root,
                env=child_env(),
                start_new_session=True,
            )
        except OSError as error:
            raise UpError(f"{spec.name} could not start: {error}") from None
    state.pid_file(spec.name).write_text(f"{proc.pid}\n")
    return proc


async def _wait_ready(
    state: State, spec: ProcessSpec, http: httpx.AsyncClient, proc: subprocess.Popen[bytes] | None
) -> None:
    url = spec.health_url(state)
    deadline = time.monotonic() + spec.ready_timeout
    while not await probe(http, url):
        if proc is not None and proc.poll() is not None:
            state.pid_file(spec.name).unlink(missing_ok=True)
            raise UpError(
                f"{spec.name} exited with code {proc.returncode} before it was ready; "
                f"last lines of {state.log_file(spec.name)}:\n{log_tail(state.log_file(spec.name))}"
            )
        if time.monotonic() > deadline:
            raise UpError(
                f"{spec.name} not ready at {url} after {spec.ready_timeout:.0f}s; "
                f"last lines of {state.log_file(spec.name)}:\n{log_tail(state.log_file(spec.name))}"
            )
        await asyncio.sleep(POLL)


async def up(state_dir: Path, port: int | None = None, etcd_servers: list[str] | None = None) -> str:
    """Start whatever is not running, wait until all is ready, write the kubeconfig; return a summary.

    Components start as soon as the ones they need are ready, so independent ones come up in parallel.
    """
    started = time.monotonic()
    state = State.load(state_dir)
    _assign_ports(state, port, etcd_servers)
    state.save()
    ensure_pki(state.pki, apiserver_hosts())
    write_kubeconfig(state.kubeconfig, state.server, state.pki)

    specs = enabled_specs(state)
    _check_ports(state, specs)
    names = {spec.name for spec in specs}
    ready = {spec.name: asyncio.Event() for spec in specs}
    launched: list[str] = []

    async def bring_up(spec: ProcessSpec, http: httpx.AsyncClient) -> None:
        for need in spec.needs:
            if need in names:
                await ready[need].wait()
        proc = None
        if running_pid(state, spec.name) is None:
            proc = _launch(state, spec)
            launched.append(spec.name)
        await _wait_ready(state, spec, http, proc)
        ready[spec.name].set()

    async with httpx.AsyncClient(verify=_tls_context(state)) as http:
        try:
            async with asyncio.TaskGroup() as group:
                for spec in specs:
                    group.create_task(bring_up(spec, http))
        except* UpError as errors:
            hint = f"Whatever did start keeps running; stop it with: pyk8s down --state-dir {state.root}"
            raise UpError("\n".join([*(str(e) for e in errors.exceptions), hint])) from None

    elapsed = time.monotonic() - started
    headline = f"pyk8s is up in {elapsed:.1f}s (started {', '.join(launched)})" if launched else "pyk8s is already up"
    return f"{headline}: {state.server}\n{usage(state)}"


def usage(state: State) -> str:
    return f"To use it:\n  export KUBECONFIG={state.kubeconfig}\n  kubectl get ns"


async def _stop(pid: int, state: State) -> bool:
    """SIGTERM, then SIGKILL if it is still there after STOP_TIMEOUT; True if it needed the kill."""
    deadline = time.monotonic() + STOP_TIMEOUT
    killed = False
    try:
        os.kill(pid, signal.SIGTERM)
        while _proc_alive(pid, state):
            if not killed and time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                killed = True
            await asyncio.sleep(POLL)
    except ProcessLookupError:
        pass
    return killed


async def down(state_dir: Path) -> list[str]:
    """Stop in reverse start order (API clients before the apiserver before etcd); data stays."""
    state = State.load(state_dir)
    report = []
    for spec in reversed(SPECS):
        pid = running_pid(state, spec.name)
        if pid is None:
            if state.pid_file(spec.name).exists():
                report.append(f"{spec.name}: was not running")
            state.pid_file(spec.name).unlink(missing_ok=True)
            continue
        killed = await _stop(pid, state)
        state.pid_file(spec.name).unlink(missing_ok=True)
        report.append(f"{spec.name}: stopped (pid {pid}{', killed' if killed else ''})")
    return report


async def status(state_dir: Path) -> list[ProcessStatus]:
    state = State.load(state_dir)
    specs = enabled_specs(state)
    has_pki = state.pki.ca[0].exists() and state.pki.client(ADMIN)[0].exists()
    async with httpx.AsyncClient(verify=_tls_context(state) if has_pki else True) as http:

        async def one(spec: ProcessSpec) -> ProcessStatus:
            pid = running_pid(state, spec.name)
            ready = pid is not None and await probe(http, spec.health_url(state))
            return ProcessStatus(spec, pid, pid is not None, ready)

        return list(await asyncio.gather(*(one(spec) for spec in specs)))


def format_status(rows: Iterable[ProcessStatus]) -> str:
    table = [("NAME", "PID", "RUNNING", "READY")]
    for row in rows:
        yes_no = ("yes" if row.running else "no", "yes" if row.ready else "no")
        table.append((row.spec.name, str(row.pid or "-"), *yes_no))
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table)
