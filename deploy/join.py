"""`pyk8s join`: a machine joins as on `kubeadm join` with token discovery. It finds the cluster's CA
from the signed cluster-info ConfigMap (deploy.discovery), writes the CA, the kubelet's bootstrap
kubeconfig and the node units' env files, starts the units, and waits for the kubelet's TLS bootstrap:
the kubelet itself asks for its certificate and from then on is system:node:<name>."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import yaml

from deploy import machine
from deploy.bootstrap import CLUSTER_CIDR, SERVICE_CIDR
from deploy.controlplane import start_units
from deploy.discovery import NotYet, discover
from deploy.machine import Layout
from services.runtime import pki

BOOTSTRAP_TIMEOUT = 300.0
DISCOVERY_TIMEOUT = 300.0


class JoinError(Exception):
    """A step of join failed; the message names it."""


@dataclass(frozen=True)
class JoinOptions:
    address: str
    token: str
    ca_hashes: list[str]
    node_name: str
    node_ip: str
    pod_network_cidr: str = CLUSTER_CIDR
    service_cidr: str = SERVICE_CIDR


async def join(layout: Layout, opts: JoinOptions, say: Callable[[str], None] = print) -> str:
    say(f"[preflight] discovering the cluster at {opts.address}")
    deadline = time.monotonic() + DISCOVERY_TIMEOUT
    while True:
        try:
            info = await discover(opts.address, opts.token, opts.ca_hashes)
            break
        except NotYet as error:
            if time.monotonic() > deadline:
                raise
            say(f"[discovery] {error}; retrying")
            await asyncio.sleep(1.0)
    say(f"[discovery] cluster-info is signed for the token and its CA matches the pin; API server {info.server}")
    await asyncio.to_thread(_write, layout, opts, info.server, info.ca_pem)
    await start_units(machine.NODE_UNITS, say)
    say("[kubelet-start] waiting for the kubelet to perform the TLS Bootstrap")
    kubeconfig = layout.kubeconfig("kubelet")
    deadline = time.monotonic() + BOOTSTRAP_TIMEOUT
    while not kubeconfig.exists():
        if time.monotonic() > deadline:
            raise JoinError(f"the kubelet did not write {kubeconfig} within {BOOTSTRAP_TIMEOUT:.0f}s")
        await asyncio.sleep(0.1)
    return f"This node has joined the cluster as {opts.node_name}: run 'kubectl get nodes' on the control plane."


def _write(layout: Layout, opts: JoinOptions, server: str, ca_pem: bytes) -> None:
    pki.write_file(layout.pki.ca[0], ca_pem, 0o644)
    body = yaml.safe_dump(machine.bootstrap_kubeconfig(server, ca_pem, opts.token), sort_keys=False)
    pki.write_file(layout.bootstrap_kubeconfig, body.encode(), 0o600)
    machine.write_containerd_config(layout)
    machine.node_env(layout, opts.node_name, opts.node_ip, layout.kubeconfig("kubelet"), opts.pod_network_cidr,
                     machine.dns_ip(opts.service_cidr))
