"""Scraping kubelets: their /metrics/resource in the Prometheus text format, read into samples."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import httpx
import structlog

log = structlog.get_logger("metrics_server.scraper")

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)(?:\s+(\d+))?\s*$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Point:
    """Cumulative CPU in core-seconds, the working set in bytes, and when both were read (milliseconds since
    the epoch, kept whole: as float seconds they would lose a tenth of a microsecond)."""

    cpu: float
    memory: int
    at_ms: int
    started: float = 0.0


@dataclass
class NodeSample:
    node: Point | None = None
    #: (namespace, pod) -> container -> point
    pods: dict[tuple[str, str], dict[str, Point]] = field(default_factory=dict)


def parse(text: str, now: float) -> NodeSample:
    """The node's and each container's point; a sample without a timestamp is stamped `now`."""
    values: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, int]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels, value, stamp = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        pairs = tuple(sorted(_LABEL.findall(labels or "")))
        values[(name, pairs)] = (number, int(stamp) if stamp else int(now * 1000))
    sample = NodeSample()
    cpu, memory = values.get(("node_cpu_usage_seconds_total", ())), values.get(("node_memory_working_set_bytes", ()))
    if cpu is not None and memory is not None:
        sample.node = Point(cpu[0], int(memory[0]), cpu[1])
    for (name, pairs), (value, at) in values.items():
        if name != "container_cpu_usage_seconds_total":
            continue
        labels = dict(pairs)
        memory = values.get(("container_memory_working_set_bytes", pairs))
        if memory is None:
            continue
        started = values.get(("container_start_time_seconds", pairs), (0.0, 0))[0]
        key = (labels.get("namespace", ""), labels.get("pod", ""))
        sample.pods.setdefault(key, {})[labels.get("container", "")] = Point(value, int(memory[0]), at, started)
    return sample


def kubelet_url(node: dict[str, Any], address_types: list[str]) -> str | None:
    """Where the node's kubelet listens, by the first preferred address type it reports."""
    status = node.get("status") or {}
    port = int(((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port") or 10250)
    for kind in address_types:
        for address in status.get("addresses") or ():
            if address.get("type") == kind and address.get("address"):
                host = address["address"]
                return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    return None


async def scrape(http: httpx.AsyncClient, node: dict[str, Any], address_types: list[str],
                 now: float) -> NodeSample | None:
    """One node's sample; None when its kubelet cannot be reached (within the client's timeout)."""
    name = node["metadata"]["name"]
    url = kubelet_url(node, address_types)
    if url is None:
        log.warning("node has no usable address", node=name)
        return None
    try:
        response = await http.get(f"{url}/metrics/resource")
        response.raise_for_status()
    except (httpx.HTTPError, OSError) as exc:
        log.warning("failed to scrape node", node=name, error=str(exc) or type(exc).__name__)
        return None
    return parse(response.text, now)
