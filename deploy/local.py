"""Run the cluster as detached local processes: start in dependency order, stop by pid, report status."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import httpx

from deploy import nodes
from deploy.bootstrap import (
    ADMIN,
    CONTROLLER_MANAGER,
    PROXY,
    SCHEDULER,
    apiserver_hosts,
    ensure_client_cert,
    ensure_encryption_config,
    ensure_etcd_pki,
    ensure_pki,
    node_client,
    write_kubeconfig,
)
from deploy.clusterinfo import ensure_cluster_info
from deploy.nodes import NetworkError, NodeNet
from deploy.processes import HOLLOW_PREFIX, ProcessSpec, advertise_address, child_env, specs
from deploy.state import PROXY_MODES, State, free_port, port_in_use

POLL = 0.05
STOP_TIMEOUT = 10.0
LOG_TAIL_LINES = 25


class UpError(Exception):
    """A component did not become ready; the message carries the tail of its log."""


#: The process that restarts dead ones (deploy/supervisor.py); `up` starts it last, `down` stops it first.
SUPERVISOR = "supervisor"


@dataclass(frozen=True)
class ProcessStatus:
    spec: ProcessSpec
    pid: int | None
    running: bool
    ready: bool
    restarts: int = 0


def _supervisor_spec() -> ProcessSpec:
    return ProcessSpec(name=SUPERVISOR, argv=lambda state: [sys.executable, "-m", "deploy.supervisor",
                                                            f"--state-dir={state.root}"],
                       health=lambda state: "")


def restarts(state: State, name: str) -> int:
    """How often the supervisor restarted `name` since `pyk8s up` started it."""
    try:
        return int(state.restarts_file(name).read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


async def _stop_supervisor(state: State) -> None:
    """Before anything is started or stopped on purpose, so the supervisor never undoes it."""
    pid = running_pid(state, SUPERVISOR)
    if pid is not None:
        await _stop(pid, state)
    state.pid_file(SUPERVISOR).unlink(missing_ok=True)


def enabled_specs(state: State, node_nets: list[NodeNet] | None = None) -> list[ProcessSpec]:
    return [spec for spec in specs(state, node_nets) if spec.enabled(state)]


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


async def probe(http: httpx.AsyncClient, url: str, tls: ssl.SSLContext | None = None) -> bool:
    """200 from an http(s) health URL (through a client of its own with `tls`), or an accepted connection
    on a unix:// socket."""
    if url.startswith("unix://"):
        try:
            _, writer = await asyncio.wait_for(asyncio.open_unix_connection(url.removeprefix("unix://")), 2.0)
        except (OSError, TimeoutError):
            return False
        writer.close()
        return True
    try:
        if tls is None:
            response = await http.get(url, timeout=2.0)
        else:
            async with httpx.AsyncClient(verify=tls) as own:
                response = await own.get(url, timeout=2.0)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def _health_tls(state: State, spec: ProcessSpec) -> ssl.SSLContext | None:
    """The spec's own TLS settings for its health check; a default context, which fails the check, when
    its certs are missing (a state dir whose PKI is gone)."""
    if spec.health_tls is None:
        return None
    try:
        return spec.health_tls(state)
    except OSError:
        return ssl.create_default_context()


@dataclass(frozen=True)
class Request:
    """What `pyk8s up` was asked for; None keeps what the state dir remembers."""

    port: int | None = None
    etcd_servers: list[str] | None = None
    nodes: int | None = None
    hollow_nodes: int | None = None
    proxy_mode: str | None = None
    service_lb_pool: str | None = None
    #: files for --etcd-servers' TLS and the apiserver's EncryptionConfiguration; "" forgets one
    etcd_cafile: str | None = None
    etcd_certfile: str | None = None
    etcd_keyfile: str | None = None
    encryption_provider_config: str | None = None


def _apply(state: State, request: Request) -> None:
    s = state.settings
    if request.port is not None:
        s.port = request.port
    if request.etcd_servers is not None:
        s.etcd_servers = request.etcd_servers
    for name in ("etcd_cafile", "etcd_certfile", "etcd_keyfile", "encryption_provider_config"):
        given = getattr(request, name)
        if given is not None:
            setattr(s, name, str(_existing_file(Path(given))) if given else "")
    if request.nodes is not None:
        if not 0 <= request.nodes <= nodes.MAX_NODES:
            raise UpError(f"--nodes must be between 0 and {nodes.MAX_NODES}")
        s.nodes = request.nodes
    if request.hollow_nodes is not None:
        s.hollow_nodes = max(request.hollow_nodes, 0)
    if request.proxy_mode is not None:
        if request.proxy_mode not in PROXY_MODES:
            raise UpError(f"--proxy-mode must be one of {', '.join(PROXY_MODES)}")
        s.proxy_mode = request.proxy_mode
    if request.service_lb_pool is not None:
        for item in filter(None, (i.strip() for i in request.service_lb_pool.split(","))):
            try:
                if "-" in item:
                    [ipaddress.IPv4Address(part.strip()) for part in item.split("-", 1)]
                else:
                    ipaddress.IPv4Network(item, strict=False)
            except ValueError:
                raise UpError(f"--service-lb-pool: {item!r} is neither an IPv4 CIDR nor a first-last range") from None
        s.service_lb_pool = request.service_lb_pool


def _assign_ports(state: State) -> None:
    """Pick ports once and keep them; re-pick only if another program took them meanwhile."""
    s = state.settings
    taken: set[int] = set()

    def pick(current: int) -> int:
        port = current
        while not port or port in taken or port_in_use(port):
            port = free_port()
        taken.add(port)
        return port

    for spec in specs(state):
        if spec.health_port and running_pid(state, spec.name) is None:
            s.component_ports[spec.name] = pick(s.component_ports.get(spec.name, 0))
        elif spec.health_port:
            taken.add(s.component_ports[spec.name])
    if s.nodes and running_pid(state, "cluster-dns") is None:
        s.dns_port = pick(s.dns_port)
    if s.nodes and running_pid(state, "image-registry") is None:
        s.registry_port = pick(s.registry_port)
    if state.external_etcd or running_pid(state, "etcd") is not None:
        return
    s.etcd_client_port = pick(s.etcd_client_port)
    s.etcd_peer_port = pick(s.etcd_peer_port)


def _check_ports(state: State, wanted: Iterable[ProcessSpec]) -> None:
    clashes = [
        f"{spec.name} cannot listen on 127.0.0.1:{port}: another program uses it"
        for spec in wanted
        if running_pid(state, spec.name) is None
        for port in spec.listens(state)
        if port_in_use(port)
    ]
    if clashes:
        raise UpError("\n".join([*clashes, "(pyk8s up --port N moves the apiserver)"]))


def _argv_file(state: State, name: str) -> Path:
    return state.root / "run" / f"{name}.argv"


def _argv_changed(state: State, spec: ProcessSpec) -> bool:
    """The running process was started with another command line (other nodes, proxy mode, port...)."""
    try:
        old = _argv_file(state, spec.name).read_text()
    except FileNotFoundError:
        return False
    return old != "\0".join(spec.argv(state))


def launch(state: State, spec: ProcessSpec) -> subprocess.Popen[bytes]:
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
    _argv_file(state, spec.name).write_text("\0".join(argv))
    return proc


async def _wait_ready(
    state: State, spec: ProcessSpec, http: httpx.AsyncClient, proc: subprocess.Popen[bytes] | None
) -> None:
    url, tls = spec.health(state), _health_tls(state, spec)
    deadline = time.monotonic() + spec.ready_timeout
    while not await probe(http, url, tls):
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


def _check_host(state: State) -> None:
    """Real nodes need root (namespaces, mounts) and the container tools; say so before starting anything."""
    if not state.settings.nodes:
        return
    if os.geteuid() != 0:
        raise UpError("real nodes need root (network namespaces, containerd); use --no-nodes or run as root")
    missing = [tool for tool in ("containerd", "runc", "ctr", "nsenter", "ip", "iptables", "nft")
               if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists()]
    if not Path("/usr/lib/cni/bridge").exists():
        missing.append("/usr/lib/cni/bridge (containernetworking-plugins)")
    if missing:
        raise UpError(f"missing for real nodes: {', '.join(missing)} (run deploy/install.sh, or use --no-nodes)")


async def _stop_processes(state: State, wanted: list[ProcessSpec], report: list[str]) -> None:
    """Stop in reverse start order (API clients before the apiserver before etcd), with each stop hook."""
    for spec in reversed(wanted):
        pid = running_pid(state, spec.name)
        if spec.before_stop is not None and pid is not None:
            await spec.before_stop(state)
        if pid is None:
            if state.pid_file(spec.name).exists():
                report.append(f"{spec.name}: was not running")
            state.pid_file(spec.name).unlink(missing_ok=True)
        else:
            killed = await _stop(pid, state)
            state.pid_file(spec.name).unlink(missing_ok=True)
            report.append(f"{spec.name}: stopped (pid {pid}{', killed' if killed else ''})")
        state.restarts_file(spec.name).unlink(missing_ok=True)
        if spec.after_stop is not None:
            await spec.after_stop(state)


async def _retire_nodes(state: State, report: list[str]) -> list[NodeNet]:
    """Nodes a smaller --nodes dropped: stop their processes and pods, remove their network."""
    current = {node.name for node in nodes.node_nets(state)}
    retired = [node for node in nodes.known_node_nets(state) if node.name not in current]
    if retired:
        node_procs = [spec for spec in specs(state, retired) if spec.node]
        await _stop_processes(state, node_procs, report)
        report.extend(await nodes.remove_network(state, retired, bridge=not state.settings.nodes))
    return retired


async def _switch_proxy_mode(state: State, previous: str, report: list[str]) -> None:
    """Another --proxy-mode: stop the running proxies and remove the old mode's rules from each node."""
    if previous == state.settings.proxy_mode:
        return
    proxies = [spec for spec in enabled_specs(state) if spec.name.startswith("kube-proxy-")]
    await _stop_processes(state, proxies, report)
    for node in nodes.node_nets(state):
        if nodes.netns_exists(node.netns):
            await nodes.run(sys.executable, "-m", "proxy_agent", "--cleanup",
                            f"--iptables-binary={node.bin_dir / 'iptables'}", f"--nft-binary={node.bin_dir / 'nft'}",
                            check=False)


def write_component_kubeconfigs(state: State) -> None:
    """One kubeconfig per component identity, as kubeadm writes scheduler.conf, controller-manager.conf
    and a kubelet.conf per node (its `system:node:<name>` cert issued here, as kubeadm issues a
    control-plane node's); only the admin's is system:masters."""
    for identity in (SCHEDULER, CONTROLLER_MANAGER, PROXY):
        write_kubeconfig(state.component_kubeconfig(identity.name), state.server, state.pki, identity)
    for node in nodes.node_nets(state):
        identity = node_client(node.name)
        ensure_client_cert(state.pki, identity)
        write_kubeconfig(state.component_kubeconfig(identity.name), state.server, state.pki, identity)


async def up(state_dir: Path, request: Request | None = None) -> str:
    """Start whatever is not running, wait until all is ready, write the kubeconfig; return a summary.

    Components start as soon as the ones they need are ready, so independent ones come up in parallel.
    """
    started = time.monotonic()
    request = request or Request()
    state = State.load(state_dir)
    previous_mode, previous_hollow = state.settings.proxy_mode, state.settings.hollow_nodes
    _apply(state, request)
    _check_host(state)
    try:
        if state.settings.nodes:
            await nodes.choose_segment(state)
    except NetworkError as error:
        raise UpError(str(error)) from None
    _assign_ports(state)
    state.save()
    ensure_pki(state.pki, apiserver_hosts([advertise_address(state)]))
    ensure_etcd_pki(state.pki)
    if not state.settings.encryption_provider_config:
        ensure_encryption_config(state.pki)
    write_kubeconfig(state.kubeconfig, state.server, state.pki)
    write_component_kubeconfigs(state)

    wanted = enabled_specs(state)
    _check_ports(state, wanted)
    await _stop_supervisor(state)
    changes: list[str] = []
    await _stop_processes(state, [spec for spec in specs(state) if not spec.enabled(state)], changes)
    retired = await _retire_nodes(state, changes)
    await _switch_proxy_mode(state, previous_mode, changes)
    # gcc builds the pause image while the control plane starts; each node's containerd imports it.
    prebuild = asyncio.create_task(nodes.image_archives(state)) if state.settings.nodes else None
    if prebuild is not None:
        # A failed build is reported by the import that needs it, not as an unretrieved task error.
        prebuild.add_done_callback(lambda task: task.cancelled() or task.exception())
    try:
        if state.settings.nodes:
            await nodes.ensure_network(state, nodes.node_nets(state))
    except (NetworkError, OSError) as error:
        raise UpError(f"node network: {error}") from None

    names = {spec.name for spec in wanted}
    ready = {spec.name: asyncio.Event() for spec in wanted}
    launched: list[str] = []

    async def bring_up(spec: ProcessSpec, http: httpx.AsyncClient) -> None:
        for need in spec.needs:
            if need in names:
                await ready[need].wait()
        try:
            if spec.prepare is not None:
                await spec.prepare(state, http)
            proc = None
            pid = running_pid(state, spec.name)
            if pid is not None and _argv_changed(state, spec):
                await _stop(pid, state)
                changes.append(f"{spec.name}: restarted (its command line changed)")
                pid = None
            if pid is None:
                proc = launch(state, spec)
                launched.append(spec.name)
            await _wait_ready(state, spec, http, proc)
            if proc is not None and spec.after_ready is not None:
                await spec.after_ready(state, http)
        except (NetworkError, RuntimeError, OSError, subprocess.SubprocessError, httpx.HTTPError) as error:
            raise UpError(f"{spec.name}: {error}") from None
        ready[spec.name].set()

    async def forget_nodes(http: httpx.AsyncClient) -> None:
        """Node objects of real nodes retired above and of hollow nodes a smaller --hollow-nodes dropped."""
        await ready["apiserver"].wait()
        gone = [node.name for node in retired]
        gone += [f"{HOLLOW_PREFIX}-{i}" for i in range(state.settings.hollow_nodes, previous_hollow)]
        for name in gone:
            await nodes.delete_node(state, http, name)

    async with httpx.AsyncClient(verify=_tls_context(state)) as http:
        try:
            async with asyncio.TaskGroup() as group:
                for spec in wanted:
                    group.create_task(bring_up(spec, http))
                if retired or previous_hollow > state.settings.hollow_nodes:
                    group.create_task(forget_nodes(http))
        except* UpError as errors:
            launch(state, _supervisor_spec())
            hint = f"Whatever did start keeps running (supervised); stop it with: pyk8s down --state-dir {state.root}"
            raise UpError("\n".join([*(str(e) for e in errors.exceptions), hint])) from None
        finally:
            if prebuild is not None and not prebuild.done():
                prebuild.cancel()
        try:
            await ensure_cluster_info(http, state.server, f"https://{advertise_address(state)}:{state.settings.port}",
                                      Path(state.pki.ca[0]))
        except (RuntimeError, httpx.HTTPError) as error:
            raise UpError(f"cluster-info: {error}") from None

    launch(state, _supervisor_spec())  # last, so it never races `up` over a process
    elapsed = time.monotonic() - started
    headline = f"pyk8s is up in {elapsed:.1f}s (started {', '.join(launched)})" if launched else "pyk8s is already up"
    return "\n".join([*changes, f"{headline}: {state.server}", _nodes_line(state), usage(state)])


def _nodes_line(state: State) -> str:
    s = state.settings
    real = ", ".join(f"{n.name} ({n.ip}, netns {n.netns})" for n in nodes.node_nets(state)) or "none"
    hollow = f"; hollow nodes: {s.hollow_nodes}" if s.hollow_nodes else ""
    return f"nodes: {real}{hollow}; kube-proxy mode {s.proxy_mode}"


def usage(state: State) -> str:
    return f"To use it:\n  export KUBECONFIG={state.kubeconfig}\n  kubectl get nodes"


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
    """Stop every process, the nodes' pods and containerd; delete the node network by exact name; data stays."""
    state = State.load(state_dir)
    report: list[str] = []
    await _stop_supervisor(state)
    await _stop_processes(state, specs(state, nodes.known_node_nets(state)), report)
    report.extend(await nodes.remove_network(state, nodes.known_node_nets(state), bridge=True))
    return report


async def status(state_dir: Path) -> list[ProcessStatus]:
    state = State.load(state_dir)
    wanted = enabled_specs(state)
    has_pki = state.pki.ca[0].exists() and state.pki.client(ADMIN)[0].exists()
    async with httpx.AsyncClient(verify=_tls_context(state) if has_pki else True) as http:

        async def one(spec: ProcessSpec) -> ProcessStatus:
            pid = running_pid(state, spec.name)
            ready = pid is not None and await probe(http, spec.health(state), _health_tls(state, spec))
            return ProcessStatus(spec, pid, pid is not None, ready, restarts(state, spec.name))

        return list(await asyncio.gather(*(one(spec) for spec in wanted)))


def _existing_file(path: Path) -> Path:
    if not path.is_file():
        raise UpError(f"{path}: no such file")
    return path.resolve()


async def load_image(state_dir: Path, archive: Path, name: str | None = None) -> list[str]:
    """`pyk8s image load`: put a docker-save or OCI archive's images into the image registry, which every
    node pulls from; running nodes pull them at once, so pods with `imagePullPolicy: Never` find them too."""
    state = State.load(state_dir)
    path = _existing_file(archive)
    try:
        images = await nodes.store_images(state, [path], name)
    except RuntimeError as error:
        raise UpError(str(error)) from None
    refs = list(dict.fromkeys(str(image.ref) for image in images))
    lines = [f"{image.ref}: stored ({image.manifest.digest})" for image in images]
    if running_pid(state, "image-registry") is None:
        return [*lines, "the image registry is not running: nodes pull from it once `pyk8s up` started it"]
    targets = [n for n in nodes.node_nets(state) if running_pid(state, f"containerd-{n.name}") is not None]
    try:
        await asyncio.gather(*(nodes.pull_images(n, refs) for n in targets))
    except RuntimeError as error:
        raise UpError(str(error)) from None
    return [*lines, *(f"{ref} imported into {n.name}" for n in targets for ref in refs)]


def list_images(state_dir: Path) -> list[tuple[str, str, int]]:
    """(reference, manifest digest, bytes) of each image the registry serves."""
    return nodes.stored_images(State.load(state_dir))


def human_size(size: int) -> str:
    """Decimal units with four significant digits, as `crictl images` and `docker images` print sizes."""
    units = ("B", "kB", "MB", "GB", "TB")
    value, unit = float(size), 0
    while value >= 1000 and unit < len(units) - 1:
        value, unit = value / 1000, unit + 1
    return f"{value:.4g}{units[unit]}"


def format_images(rows: Iterable[tuple[str, str, int]]) -> str:
    return _table([("REF", "DIGEST", "SIZE"), *((ref, digest, human_size(size)) for ref, digest, size in rows)])


def format_status(rows: Iterable[ProcessStatus]) -> str:
    table = [("NAME", "PID", "RUNNING", "READY", "RESTARTS")]
    for row in rows:
        yes_no = ("yes" if row.running else "no", "yes" if row.ready else "no")
        table.append((row.spec.name, str(row.pid or "-"), *yes_no, str(row.restarts)))
    return _table(table)


def _table(table: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table)
