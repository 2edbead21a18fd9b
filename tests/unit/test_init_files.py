"""What `pyk8s init` writes before anything runs: kubeadm's PKI layout, a kubeconfig per component with that
component's own identity (only the admin is system:masters), the kubelet's bootstrap token kubeconfig,
and one env file per unit whose ARGS the units' ExecStart splits into flags; a second run keeps the PKI
and the operator's EXTRA_ARGS."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from deploy import machine
from deploy.controlplane import InitOptions, write_files
from services.auth import bootstraptoken as bt


def _subject(kubeconfig: Path) -> tuple[str, list[str]]:
    user = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]
    cert = x509.load_pem_x509_certificate(base64.b64decode(user["client-certificate-data"]))
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    return str(cn), [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]


def test_init_writes_pki_identities_bootstrap_and_env_files(tmp_path: Path) -> None:
    layout = machine.Layout(config_dir=tmp_path / "etc", pki_root=tmp_path / "pki")
    write_files(layout, InitOptions("10.1.2.3", "cp-1", token="abcdef.0123456789abcdef"))
    for name in ("ca", "apiserver", "sa", "etcd/ca", "etcd/server", "apiserver-etcd-client"):
        suffix = (".pub", ".key") if name == "sa" else (".crt", ".key")
        assert all((tmp_path / "pki" / f"{name}{s}").exists() for s in suffix), name
    assert _subject(layout.kubeconfig("admin")) == ("kubernetes-admin", ["system:masters"])
    assert _subject(layout.kubeconfig("scheduler")) == ("system:kube-scheduler", [])
    assert _subject(layout.kubeconfig("controller-manager")) == ("system:kube-controller-manager", [])
    assert _subject(layout.kubeconfig("kube-proxy")) == ("system:kube-proxy", [])
    assert _subject(layout.kubeconfig("dns"))[0] == "system:serviceaccount:kube-system:coredns"
    boot = yaml.safe_load(layout.bootstrap_kubeconfig.read_text())
    assert boot["users"][0]["user"] == {"token": "abcdef.0123456789abcdef"}
    assert boot["clusters"][0]["cluster"]["server"] == "https://10.1.2.3:6443"
    assert bt.TOKEN_RE.match((layout.config_dir / "token").read_text())
    env = layout.env("pyk8s-apiserver").read_text()
    assert 'ARGS="--etcd-servers=https://127.0.0.1:2379 --advertise-address=10.1.2.3 ' in env
    kubelet = layout.env("pyk8s-kubelet").read_text()
    assert "--hostname-override=cp-1" in kubelet and "--node-ip=10.1.2.3" in kubelet
    assert "--register-with-taints=node-role.kubernetes.io/control-plane:NoSchedule" in kubelet
    assert "--cluster-dns=10.96.0.10" in kubelet
    assert "--initial-cluster=cp-1=https://10.1.2.3:2380" in layout.env("pyk8s-etcd").read_text()
    assert f'root = "{layout.state_dir / "containerd"}"' in layout.containerd_config.read_text()


def test_init_again_keeps_the_ca_and_the_operators_extra_args(tmp_path: Path) -> None:
    layout = machine.Layout(config_dir=tmp_path / "etc")
    opts = InitOptions("10.1.2.3", "cp-1")
    write_files(layout, opts)
    ca = layout.pki.ca[0].read_bytes()
    env = layout.env("pyk8s-scheduler")
    env.write_text(env.read_text().replace('EXTRA_ARGS=""', 'EXTRA_ARGS="--v=4 --kube-api-qps=50"'))
    write_files(layout, opts)
    assert layout.pki.ca[0].read_bytes() == ca
    assert 'EXTRA_ARGS="--v=4 --kube-api-qps=50"' in env.read_text()
