"""PodSecurity admission on a real apiserver and etcd, driven by the real kubectl: namespace labels
choose the level and version each mode holds pods to; enforce refuses with upstream's message, warn
and workload templates answer with the Warning header kubectl prints; labels are validated, a
tightened enforce level warns about the pods already there, and the admission configuration file
gives defaults and exemptions."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import APIServerProcess, Kubectl, eventually, start_apiserver

RESTRICTED_PRIVILEGED_POD = (
    'violates PodSecurity "restricted:latest": privileged (container "c" must not set '
    'securityContext.privileged=true), allowPrivilegeEscalation != false (container "c" must set '
    'securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "c" must set '
    'securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "c" must set '
    'securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must set '
    'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")')


def namespace(kubectl: Kubectl, **labels: str) -> str:
    name = f"pss-{uuid.uuid4().hex[:8]}"
    kubectl.run("create", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {f"pod-security.kubernetes.io/{k.replace('_', '-')}": v
                                              for k, v in labels.items()}}}))
    return name


def pod(name: str, container: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox", **(container or {})}], **spec}}


def create(kubectl: Kubectl, ns: str, obj: dict[str, Any]) -> Any:
    return kubectl.run("-n", ns, "create", "-f", "-", stdin=json.dumps(obj), check=False)


RESTRICTED_OK = {"securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                     "runAsNonRoot": True, "runAsUser": 1000,
                                     "seccompProfile": {"type": "RuntimeDefault"}}}


def test_restricted_namespace_refuses_a_privileged_pod(kubectl: Kubectl) -> None:
    ns = namespace(kubectl, enforce="restricted")
    result = create(kubectl, ns, pod("priv", {"securityContext": {"privileged": True}}))
    assert result.returncode == 1
    assert result.stderr.strip() == ('Error from server (Forbidden): error when creating "STDIN": pods "priv" is '
                                     f'forbidden: {RESTRICTED_PRIVILEGED_POD}')
    result = create(kubectl, ns, pod("fine", RESTRICTED_OK))
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr
    assert kubectl.json("-n", ns, "get", "pod", "fine")["metadata"]["name"] == "fine"


def test_warn_mode_admits_and_kubectl_prints_the_warning(kubectl: Kubectl) -> None:
    ns = namespace(kubectl, warn="baseline")
    result = create(kubectl, ns, pod("net", hostNetwork=True))
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == ('Warning: would violate PodSecurity "baseline:latest": host namespaces '
                                     '(hostNetwork=true)')
    kubectl.json("-n", ns, "get", "pod", "net")


def test_workload_templates_warn_at_the_enforce_level(kubectl: Kubectl) -> None:
    """An unset warn level follows enforce, so a Deployment in a restricted namespace warns about the
    pods its ReplicaSet would fail to create; the Deployment itself is admitted."""
    ns = namespace(kubectl, enforce="restricted")
    result = kubectl.run("-n", ns, "create", "deployment", "web", "--image=busybox", check=False)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == (
        'Warning: would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container '
        '"busybox" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container '
        '"busybox" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container '
        '"busybox" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "busybox" must set '
        'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")')
    kubectl.json("-n", ns, "get", "deployment", "web")


def test_versions_pin_the_checks(kubectl: Kubectl) -> None:
    """runAsUser=0 is refused from v1.23 on; seccomp profiles are required from v1.19 on."""
    root = {"securityContext": {**RESTRICTED_OK["securityContext"], "runAsUser": 0}}
    pinned = namespace(kubectl, enforce="restricted", enforce_version="v1.22")
    assert create(kubectl, pinned, pod("root", root)).returncode == 0
    latest = namespace(kubectl, enforce="restricted", enforce_version="latest")
    result = create(kubectl, latest, pod("root", root))
    assert result.returncode == 1
    assert 'violates PodSecurity "restricted:latest": runAsUser=0 (container "c" must not set runAsUser=0)' \
        in result.stderr
    no_seccomp = {"securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True}}
    old = namespace(kubectl, enforce="restricted", enforce_version="v1.18")
    assert create(kubectl, old, pod("old", no_seccomp)).returncode == 0
    new = namespace(kubectl, enforce="restricted", enforce_version="v1.19")
    result = create(kubectl, new, pod("new", no_seccomp))
    assert result.stderr.strip().endswith('pods "new" is forbidden: violates PodSecurity "restricted:v1.19": '
                                          'seccompProfile (pod or container "c" must set '
                                          'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")')


def test_bad_labels_are_refused(kubectl: Kubectl) -> None:
    result = kubectl.run("create", "-f", "-", check=False, stdin=json.dumps({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "pss-bad", "labels": {"pod-security.kubernetes.io/enforce": "strict"}}}))
    assert result.returncode == 1
    assert result.stderr.strip() == (
        'The Namespace "pss-bad" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: '
        '"strict": must be one of privileged, baseline, restricted')
    ns = namespace(kubectl)
    result = kubectl.run("label", "ns", ns, "pod-security.kubernetes.io/warn-version=1.30", check=False)
    assert result.returncode == 1
    assert 'metadata.labels[pod-security.kubernetes.io/warn-version]: Invalid value: "1.30": must be "latest" or ' \
           '"v1.x"' in result.stderr
    assert "labels" not in kubectl.json("get", "ns", ns)["metadata"] or \
        "pod-security.kubernetes.io/warn-version" not in kubectl.json("get", "ns", ns)["metadata"]["labels"]


def test_tightening_enforce_warns_about_existing_pods(kubectl: Kubectl) -> None:
    ns = namespace(kubectl)
    for name in ("b", "a"):
        assert create(kubectl, ns, pod(name, hostPID=True)).returncode == 0
    assert create(kubectl, ns, pod("ok", RESTRICTED_OK)).returncode == 0
    result = kubectl.run("label", "ns", ns, "pod-security.kubernetes.io/enforce=baseline")
    assert result.stderr.strip().splitlines() == [
        f'Warning: existing pods in namespace "{ns}" violate the new PodSecurity enforce level "baseline:latest"',
        "Warning: a (and 1 other pod): host namespaces",
    ]
    # relaxing it again checks nothing
    result = kubectl.run("label", "--overwrite", "ns", ns, "pod-security.kubernetes.io/enforce=privileged")
    assert "Warning" not in result.stderr


@pytest.fixture(scope="module")
def configured_apiserver(etcd_server: str, workdir: Path) -> Iterator[APIServerProcess]:
    """A replica whose PodSecurityConfiguration enforces baseline by default and exempts one namespace,
    one user and one runtime class."""
    directory = workdir / "podsecurity-config"
    directory.mkdir(exist_ok=True)
    (directory / "podsecurity.yaml").write_text(yaml.safe_dump({
        "apiVersion": "pod-security.admission.config.k8s.io/v1", "kind": "PodSecurityConfiguration",
        "defaults": {"enforce": "baseline", "enforce-version": "latest", "warn": "restricted"},
        "exemptions": {"namespaces": ["pss-exempt"], "usernames": ["trusted"], "runtimeClasses": ["kata"]},
    }))
    (directory / "admission.yaml").write_text(yaml.safe_dump({
        "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
        "plugins": [{"name": "PodSecurity", "path": "podsecurity.yaml"}],
    }))
    (directory / "audit-policy.yaml").write_text(yaml.safe_dump({
        "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata", "resources": [{"group": "", "resources": ["pods"]}]}, {"level": "None"}]}))
    server = start_apiserver([etcd_server], directory, "--admission-control-config-file",
                             str(directory / "admission.yaml"), "--audit-policy-file",
                             str(directory / "audit-policy.yaml"), "--audit-log-path", str(directory / "audit.log"))
    yield server
    server.stop()


def _kubeconfig(path: Path, url: str, token: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    return path


def test_configuration_defaults_and_exemptions(configured_apiserver: APIServerProcess, workdir: Path) -> None:
    admin = Kubectl(_kubeconfig(workdir / "podsecurity-config" / "admin.kubeconfig", configured_apiserver.url,
                                "test"))
    ns = namespace(admin)
    result = create(admin, ns, pod("net", hostNetwork=True))
    assert result.returncode == 1
    assert 'pods "net" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)' \
        in result.stderr
    result = create(admin, ns, pod("plain"))
    assert result.returncode == 0 and result.stderr.startswith('Warning: would violate PodSecurity "restricted:latest"')
    admin.run("create", "namespace", "pss-exempt")
    assert create(admin, "pss-exempt", pod("net", hostNetwork=True)).returncode == 0
    result = admin.run("label", "ns", "pss-exempt", "pod-security.kubernetes.io/enforce=restricted")
    assert result.stderr.strip() == ('Warning: namespace "pss-exempt" is exempt from Pod Security, and the policy '
                                     '(enforce=restricted:latest) will be ignored')
    admin.run("create", "-f", "-", stdin=json.dumps({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                                     "metadata": {"name": "kata"}, "handler": "kata"}))
    result = create(admin, ns, pod("kata", hostNetwork=True, runtimeClassName="kata"))
    assert result.returncode == 0 and not result.stderr, result.stderr
    result = admin.run("--as", "trusted", "-n", ns, "create", "-f", "-", stdin=json.dumps(pod("trusted", hostPID=True)))
    assert not result.stderr
    admin.json("-n", ns, "get", "pod", "trusted")


async def test_audit_annotations(configured_apiserver: APIServerProcess, workdir: Path) -> None:
    """The enforced policy and the audit level's violations land in the request's audit event."""
    admin = Kubectl(_kubeconfig(workdir / "podsecurity-config" / "admin.kubeconfig", configured_apiserver.url,
                                "test"))
    ns = namespace(admin, audit="restricted", warn="privileged")
    assert create(admin, ns, pod("audited")).returncode == 0
    log = workdir / "podsecurity-config" / "audit.log"

    async def event() -> dict[str, Any] | None:
        for line in log.read_text().splitlines() if log.exists() else []:
            e = json.loads(line)
            if (e.get("objectRef") or {}).get("namespace") == ns and e.get("verb") == "create" \
                    and e.get("stage") == "ResponseComplete":
                return e
        return None

    annotations = (await eventually(event, limit=30, what="the pod's audit event"))["annotations"]
    assert annotations["pod-security.kubernetes.io/enforce-policy"] == "baseline:latest"
    assert annotations["pod-security.kubernetes.io/audit-violations"].startswith(
        'would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "c" must set '
        "securityContext.allowPrivilegeEscalation=false)")
