"""Startup, liveness and readiness probes (exec, httpGet, tcpSocket, grpc) with every timing field,
and the same handlers for lifecycle hooks."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from kubelet_agent.cri.hollow import ANNOTATION_READY, simulated_ready
from kubelet_agent.cri.types import Runtime, RuntimeError_
from kubelet_agent.pods.util import named_port
from services.runtime.netns import Dialer


@dataclass
class ProbeResult:
    ok: bool
    message: str = ""


async def run_handler(handler: dict[str, Any], *, runtime: Runtime, dialer: Dialer, container_id: str,
                      container: dict[str, Any], pod_ip: str, limit: float) -> ProbeResult:
    """Run one probe or hook handler; any error is a failure with its message."""
    try:
        if "exec" in handler:
            cmd = handler["exec"].get("command") or []
            code, out, err = await asyncio.wait_for(runtime.exec_sync(container_id, cmd, max(1, int(limit))),
                                                    limit + 1)
            if code == 0:
                return ProbeResult(True)
            text = (out + err).decode(errors="replace").strip()
            return ProbeResult(False, text or f"command {cmd!r} exited with {code}")
        if runtime.simulated:
            return ProbeResult(True)
        if "httpGet" in handler:
            return await _http(handler["httpGet"], dialer, container, pod_ip, limit)
        if "tcpSocket" in handler:
            host = handler["tcpSocket"].get("host") or pod_ip
            port = named_port(container, handler["tcpSocket"]["port"])
            _, writer = await dialer.connect(host, port, limit)
            writer.close()
            return ProbeResult(True)
        if "grpc" in handler:
            return await _grpc(handler["grpc"], dialer, pod_ip, limit)
        if "sleep" in handler:
            await asyncio.sleep(int(handler["sleep"].get("seconds") or 0))
            return ProbeResult(True)
    except TimeoutError:
        return ProbeResult(False, f"timeout after {limit:g}s")
    except (OSError, RuntimeError_, ValueError, asyncio.IncompleteReadError) as exc:
        return ProbeResult(False, str(exc) or type(exc).__name__)
    return ProbeResult(False, "no handler")


async def _http(get: dict[str, Any], dialer: Dialer, container: dict[str, Any], pod_ip: str,
                limit: float) -> ProbeResult:
    host = get.get("host") or pod_ip
    port = named_port(container, get.get("port", 80))
    path = get.get("path") or "/"
    scheme = (get.get("scheme") or "HTTP").upper()
    ctx = None
    if scheme == "HTTPS":
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    headers = {"Host": f"{host}:{port}", "User-Agent": "kube-probe/1.32", "Accept": "*/*",
               "Connection": "close"}
    for h in get.get("httpHeaders") or []:
        headers[h["name"]] = h["value"]
    async with asyncio.timeout(limit):
        reader, writer = await dialer.connect(host, port, limit, ssl=ctx)
        try:
            head = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
            writer.write(head.encode())
            await writer.drain()
            line = (await reader.readline()).decode("latin-1").split()
        finally:
            writer.close()
    if len(line) < 2 or not line[1].isdigit():
        return ProbeResult(False, "malformed HTTP response")
    code = int(line[1])
    if 200 <= code < 400:
        return ProbeResult(True)
    return ProbeResult(False, f"HTTP probe failed with statuscode: {code}")


async def _grpc(spec: dict[str, Any], dialer: Dialer, pod_ip: str, limit: float) -> ProbeResult:
    port = int(spec["port"])
    service = (spec.get("service") or "").encode()
    server = None
    target = f"{pod_ip}:{port}"
    if dialer.netns:
        server, local = await dialer.forward(pod_ip, port, limit)
        target = f"127.0.0.1:{local}"
    try:
        async with grpc.aio.insecure_channel(target) as channel:
            check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                        request_serializer=lambda b: b, response_deserializer=lambda b: b)
            request = b"\x0a" + bytes([len(service)]) + service if service else b""
            try:
                reply = await check(request, timeout=limit)
            except grpc.aio.AioRpcError as exc:
                return ProbeResult(False, f"rpc error: code = {exc.code().name} desc = {exc.details()}")
        if reply == b"\x08\x01":
            return ProbeResult(True)
        return ProbeResult(False, f"service unhealthy (responded with {reply!r})")
    finally:
        if server is not None:
            server.close()


@dataclass
class _Probing:
    container_id: str
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class ProbeManager:
    """Runs one container's probes as tasks; results are read by the pod worker when it builds status."""

    def __init__(self, runtime: Runtime, dialer: Dialer, wake: Callable[[], None],
                 on_failure: Callable[[str, str, str, str], None],
                 on_event: Callable[[str, str, str], None],
                 annotations: Callable[[], dict[str, str]] | None = None) -> None:
        self.runtime = runtime
        self.annotations = annotations
        self.dialer = dialer
        self.wake = wake
        self.on_failure = on_failure
        self.on_event = on_event
        self.ready: dict[str, bool] = {}
        self.started: dict[str, bool] = {}
        self._running: dict[str, _Probing] = {}

    def sync(self, running: dict[str, tuple[str, dict[str, Any]]], pod_ip: str) -> None:
        """`running`: container name -> (id, spec) of each running app container."""
        for name in list(self._running):
            if name not in running or running[name][0] != self._running[name].container_id:
                self._cancel(name)
        for name, (cid, spec) in running.items():
            if name in self._running:
                continue
            probing = _Probing(cid)
            self._running[name] = probing
            has_startup = bool(spec.get("startupProbe"))
            self.started[cid] = not has_startup
            self.ready[cid] = not spec.get("readinessProbe") and not has_startup
            probing.tasks.append(asyncio.create_task(self._lifecycle(name, cid, spec, pod_ip)))

    def _cancel(self, name: str) -> None:
        probing = self._running.pop(name)
        for t in probing.tasks:
            t.cancel()
        self.ready.pop(probing.container_id, None)
        self.started.pop(probing.container_id, None)

    async def stop(self) -> None:
        tasks = [t for p in self._running.values() for t in p.tasks]
        for name in list(self._running):
            self._cancel(name)
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    async def _lifecycle(self, name: str, cid: str, spec: dict[str, Any], pod_ip: str) -> None:
        if spec.get("startupProbe"):
            if not await self._loop("Startup", name, cid, spec, spec["startupProbe"], pod_ip):
                return
            self.started[cid] = True
            if not spec.get("readinessProbe"):
                self.ready[cid] = True
            self.wake()
        loops = []
        if spec.get("livenessProbe"):
            loops.append(self._loop("Liveness", name, cid, spec, spec["livenessProbe"], pod_ip))
        if spec.get("readinessProbe"):
            loops.append(self._loop("Readiness", name, cid, spec, spec["readinessProbe"], pod_ip))
        if loops:
            await asyncio.gather(*loops)

    async def _loop(self, kind: str, name: str, cid: str, spec: dict[str, Any], probe: dict[str, Any],
                    pod_ip: str) -> bool:
        """Probe until the verdict ends this loop: True when a startup probe succeeds."""
        period = max(1, int(probe.get("periodSeconds") or 10))
        timeout = max(1, int(probe.get("timeoutSeconds") or 1))
        success_threshold = max(1, int(probe.get("successThreshold") or 1))
        failure_threshold = max(1, int(probe.get("failureThreshold") or 3))
        await asyncio.sleep(int(probe.get("initialDelaySeconds") or 0))
        successes = failures = 0
        while True:
            result = await run_handler(probe, runtime=self.runtime, dialer=self.dialer, container_id=cid,
                                       container=spec, pod_ip=pod_ip, limit=timeout)
            if (kind == "Readiness" and result.ok and self.runtime.simulated and self.annotations is not None
                    and not simulated_ready(self.annotations(), name)):
                result = ProbeResult(False, f"annotation {ANNOTATION_READY} says not ready")
            if result.ok:
                successes, failures = successes + 1, 0
                if successes >= success_threshold:
                    if kind == "Startup":
                        return True
                    if kind == "Readiness" and not self.ready.get(cid):
                        self.ready[cid] = True
                        self.wake()
            else:
                successes, failures = 0, failures + 1
                self.on_event(name, "Unhealthy", f"{kind} probe failed: {result.message}")
                if failures >= failure_threshold:
                    if kind == "Readiness":
                        if self.ready.get(cid):
                            self.ready[cid] = False
                            self.wake()
                    else:
                        grace = probe.get("terminationGracePeriodSeconds")
                        self.on_failure(name, cid, f"Container {name} failed {kind.lower()} probe, will be "
                                        "restarted", "" if grace is None else str(grace))
                        return False
            await asyncio.sleep(period)
