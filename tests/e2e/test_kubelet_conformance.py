"""Kubelet behaviours the upstream conformance suite checks (test/e2e/common/node), on a real kubelet
driving a real containerd, seen through real kubectl: the active deadline, preStop hooks, termination
messages and the container security context."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Kubectl
from tests.e2e.containerd_fixture import Containerd, containerd  # noqa: F401 - fixture
from tests.e2e.kubelet_fixture import wait
from tests.e2e.test_kubelet_containerd import KubeletProcess, apply, status


@pytest.fixture(scope="module")
def kubelet(kubeconfig: Path, containerd: Containerd) -> Iterator[KubeletProcess]:  # noqa: F811
    k = KubeletProcess(kubeconfig, containerd, containerd.base)
    k.start()
    yield k
    k.stop()


@pytest.fixture
def shared(containerd: Containerd, unique_ns: str) -> Path:  # noqa: F811
    """A host directory the test's pods mount as hostPath, to leave a record that outlives them."""
    path = containerd.base / "shared" / unique_ns
    path.mkdir(parents=True)
    path.chmod(0o777)
    return path


def finished(kubectl: Kubectl, ns: str, name: str) -> dict[str, Any] | None:
    st = status(kubectl, ns, name)
    return st if st.get("phase") in ("Succeeded", "Failed") else None


def terminated(st: dict[str, Any], container: str = "c") -> dict[str, Any]:
    cs = next(c for c in st["containerStatuses"] if c["name"] == container)
    return cs["state"]["terminated"]


# -- activeDeadlineSeconds ---------------------------------------------------------------------------


def test_active_deadline_can_be_shortened_and_fails_the_pod(
    kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str
) -> None:
    ns = unique_ns
    apply(kubectl, ns, {"metadata": {"name": "deadline"}, "spec": {
        "activeDeadlineSeconds": 600, "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "a", "image": "busybox", "command": ["sleep", "3600"]},
                       {"name": "b", "image": "busybox", "command": ["sleep", "3600"]}]}})
    wait(lambda: status(kubectl, ns, "deadline").get("phase") == "Running")
    longer = kubectl.run("-n", ns, "patch", "pod", "deadline", "-p", '{"spec":{"activeDeadlineSeconds":900}}',
                         check=False)
    assert longer.returncode != 0 and "spec.activeDeadlineSeconds" in longer.stderr
    kubectl.run("-n", ns, "patch", "pod", "deadline", "-p", '{"spec":{"activeDeadlineSeconds":5}}')
    st = wait(lambda: finished(kubectl, ns, "deadline"), timeout=60)
    assert st["phase"] == "Failed"
    assert st["reason"] == "DeadlineExceeded"
    assert st["message"] == "Pod was active on the node longer than the specified deadline"
    assert {c["name"] for c in st["containerStatuses"] if c["state"].get("terminated")} == {"a", "b"}
    events = kubectl.json("-n", ns, "get", "events", "--field-selector", "involvedObject.name=deadline")["items"]
    assert "DeadlineExceeded" in {e["reason"] for e in events}


# -- preStop hooks -----------------------------------------------------------------------------------


def recorder(name: str, shared_dir: str, pre_stop: dict[str, Any]) -> dict[str, Any]:
    """A pod that logs "started" and, on SIGTERM, "TERM" into the shared directory; its preStop hook
    logs there too, so the file's order is the order things happened in."""
    script = "trap 'echo TERM >> /shared/log; exit 0' TERM; echo started >> /shared/log; while true; do sleep 1; done"
    return {"metadata": {"name": name}, "spec": {
        "terminationGracePeriodSeconds": 30,
        "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", script],
                        "lifecycle": {"preStop": pre_stop},
                        "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}],
        "volumes": [{"name": "shared", "hostPath": {"path": shared_dir, "type": "Directory"}}]}}


def log_lines(shared: Path) -> list[str]:
    path = shared / "log"
    return path.read_text().split() if path.exists() else []


def hook_cgi(shared: Path) -> None:
    """A CGI script for busybox httpd (-h /shared/www) that logs "hook-http" when it is called."""
    cgi = shared / "www" / "cgi-bin" / "prestop"
    cgi.parent.mkdir(parents=True)
    cgi.write_text("#!/bin/sh\necho hook-http >> /shared/log\nprintf 'Content-Type: text/plain\\r\\n\\r\\nok\\n'\n")
    cgi.chmod(0o755)


def wait_started(kubectl: Kubectl, ns: str, name: str, shared: Path) -> None:
    try:
        wait(lambda: log_lines(shared) == ["started"])
    except AssertionError as exc:
        raise AssertionError(f"{name} never logged: {status(kubectl, ns, name)}") from exc


def test_exec_pre_stop_finishes_before_sigterm_when_deleted_with_a_grace_period(
    kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str, shared: Path
) -> None:
    hook = {"exec": {"command": ["sh", "-c", "echo hook-start >> /shared/log; sleep 2; "
                                             "echo hook-end >> /shared/log"]}}
    apply(kubectl, unique_ns, recorder("exec-hook", str(shared), hook))
    wait_started(kubectl, unique_ns, "exec-hook", shared)
    begun = time.monotonic()
    kubectl.run("-n", unique_ns, "delete", "pod", "exec-hook", "--grace-period=20", "--wait=true", timeout=60)
    assert log_lines(shared) == ["started", "hook-start", "hook-end", "TERM"]
    assert time.monotonic() - begun < 15, "the container was killed at the end of the grace period"


def test_http_pre_stop_reaches_a_handler_pod_before_sigterm(
    kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str, shared: Path
) -> None:
    ns = unique_ns
    hook_cgi(shared)
    apply(kubectl, ns, {"metadata": {"name": "handler"}, "spec": {
        "containers": [{"name": "httpd", "image": "busybox",
                        "command": ["httpd", "-f", "-p", "8080", "-h", "/shared/www"],
                        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                        "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}],
        "volumes": [{"name": "shared", "hostPath": {"path": str(shared), "type": "Directory"}}]}})
    handler = wait(lambda: (st := status(kubectl, ns, "handler")).get("podIP") and all(
        c["ready"] for c in st.get("containerStatuses") or [{"ready": False}]) and st)
    hook = {"httpGet": {"host": handler["podIP"], "port": 8080, "path": "/cgi-bin/prestop"}}
    apply(kubectl, ns, recorder("http-hook", str(shared), hook))
    wait_started(kubectl, ns, "http-hook", shared)
    kubectl.run("-n", ns, "delete", "pod", "http-hook", "--grace-period=20", "--wait=true", timeout=60)
    # the handler pod's CGI script wrote "hook-http" when the kubelet's GET reached it
    assert log_lines(shared) == ["started", "hook-http", "TERM"]




def test_http_pre_stop_served_by_a_sidecar_that_stops_last(
    kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str, shared: Path
) -> None:
    """Upstream's lifecycle hook specs serve the hook from a restartable init container of the pod itself."""
    ns = unique_ns
    hook_cgi(shared)
    pod = recorder("sidecar-hook", str(shared), {"httpGet": {"port": 8080, "path": "/cgi-bin/prestop"}})
    pod["spec"]["initContainers"] = [{
        "name": "sidecar", "image": "busybox", "restartPolicy": "Always",
        "command": ["sh", "-c", "httpd -p 8080 -h /shared/www; trap 'echo sidecar-TERM >> /shared/log; exit 0' TERM; "
                                "while true; do sleep 1; done"],
        "startupProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
        "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}]
    apply(kubectl, ns, pod)
    wait_started(kubectl, ns, "sidecar-hook", shared)
    st = wait(lambda: (s := status(kubectl, ns, "sidecar-hook")).get("phase") == "Running" and all(
        c["status"] == "True" for c in s["conditions"]) and s)
    side = st["initContainerStatuses"][0]
    assert side["state"].get("running") and side["started"] and side["ready"], side
    kubectl.run("-n", ns, "delete", "pod", "sidecar-hook", "--grace-period=20", "--wait=true", timeout=60)
    assert log_lines(shared) == ["started", "hook-http", "TERM", "sidecar-TERM"]


def test_a_finished_pod_stops_its_sidecar_gracefully(
    kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str, shared: Path
) -> None:
    ns = unique_ns
    apply(kubectl, ns, {"metadata": {"name": "done-with-sidecar"}, "spec": {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 20,
        "initContainers": [{
            "name": "sidecar", "image": "busybox", "restartPolicy": "Always",
            "command": ["sh", "-c", "trap 'echo sidecar-TERM >> /shared/log; exit 0' TERM; "
                                    "while true; do sleep 1; done"],
            "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "echo sidecar-prestop >> /shared/log"]}}},
            "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}],
        "containers": [sh("main", "sleep 2")],
        "volumes": [{"name": "shared", "hostPath": {"path": str(shared), "type": "Directory"}}]}})
    st = wait(lambda: finished(kubectl, ns, "done-with-sidecar"), timeout=90)
    assert st["phase"] == "Succeeded", st
    wait(lambda: log_lines(shared) == ["sidecar-prestop", "sidecar-TERM"], timeout=30)

# -- termination messages ----------------------------------------------------------------------------


def sh(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "command": ["sh", "-c", script], **extra}


def messages(st: dict[str, Any]) -> dict[str, str | None]:
    return {c["name"]: c["state"]["terminated"].get("message") for c in st["containerStatuses"]}


def test_termination_messages_from_the_file_or_the_log(kubelet: KubeletProcess, kubectl: Kubectl,
                                                       unique_ns: str) -> None:
    fallback = {"terminationMessagePolicy": "FallbackToLogsOnError"}
    apply(kubectl, unique_ns, {"metadata": {"name": "messages"}, "spec": {"restartPolicy": "Never", "containers": [
        sh("custom", "echo -n DONE > /dev/termination-custom-log", terminationMessagePath="/dev/termination-custom-log",
           securityContext={"runAsUser": 1000, "runAsGroup": 1000}),
        sh("fallback-fail", "echo -n DONE; false", **fallback),
        sh("fallback-ok", "echo -n OK", **fallback),
        sh("file-ok", "echo -n OK > /dev/termination-log", **fallback),
        sh("lines", "for i in $(seq 1 100); do echo line-$i; done; false", **fallback),
        sh("long-file", "head -c 3000 /dev/zero | tr '\\0' x > /dev/termination-log")]}})
    st = wait(lambda: (s := status(kubectl, unique_ns, "messages")).get("containerStatuses") and all(
        c["state"].get("terminated") for c in s["containerStatuses"]) and s, timeout=90)
    got = messages(st)
    assert got["custom"] == "DONE", "a non-root user writes its message at a path of its choice"
    assert got["fallback-fail"] == "DONE", "an empty file of a failed container falls back to its log"
    assert got["fallback-ok"] is None, "a container that succeeded reports no log"
    assert got["file-ok"] == "OK"
    assert got["lines"].split() == [f"line-{i}" for i in range(21, 101)], "the log's last 80 lines"
    assert got["long-file"] == "x" * (12 * 1024 // 6), "the pod's 12 KiB split over its six containers"


def test_termination_message_limits(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str) -> None:
    apply(kubectl, unique_ns, {"metadata": {"name": "big"}, "spec": {"restartPolicy": "Never", "containers": [
        sh("file", "head -c 904 /dev/zero | tr '\\0' a > /dev/termination-log; "
                   "head -c 4096 /dev/zero | tr '\\0' b >> /dev/termination-log"),
        sh("log", "for i in $(seq 1 100); do echo $i-$(head -c 50 /dev/zero | tr '\\0' y); done; exit 3",
           terminationMessagePolicy="FallbackToLogsOnError")]}})
    st = wait(lambda: finished(kubectl, unique_ns, "big"), timeout=90)
    got = messages(st)
    assert got["file"] == "b" * 4096, "the last 4 KiB of the file"
    log = got["log"]
    assert len(log.encode()) == 2048 and log.endswith(f"100-{'y' * 50}\n"), "the last 2 KiB of the log"


# -- security context --------------------------------------------------------------------------------


def reports(kubectl: Kubectl, ns: str, pod: dict[str, Any]) -> dict[str, str]:
    """Run a pod whose containers write what they find to their termination message; the messages."""
    pod["spec"]["restartPolicy"] = "Never"
    apply(kubectl, ns, pod)
    st = wait(lambda: finished(kubectl, ns, pod["metadata"]["name"]), timeout=90)
    return {name: (text or "").strip() for name, text in messages(st).items()}


def test_run_as_group_and_supplemental_groups(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str) -> None:
    ids = "echo $(id -u) $(id -g) / $(id -G) > /dev/termination-log"
    got = reports(kubectl, unique_ns, {"metadata": {"name": "ids"}, "spec": {
        "securityContext": {"runAsUser": 1001, "runAsGroup": 2002, "supplementalGroups": [3003], "fsGroup": 4004},
        "containers": [sh("pod-level", ids), sh("own-group", ids, securityContext={"runAsGroup": 5005})]}})
    user, group, _, *groups = got["pod-level"].split()
    assert (user, group) == ("1001", "2002")
    assert set(groups) == {"2002", "3003", "4004"}, "supplementalGroups and the fsGroup"
    user, group, _, *groups = got["own-group"].split()
    assert (user, group) == ("1001", "5005"), "the container's runAsGroup wins over the pod's"
    assert {"3003", "4004"} <= set(groups)


def test_fs_group_owns_every_kind_of_volume(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str) -> None:
    ns = unique_ns
    kubectl.run("-n", ns, "create", "secret", "generic", "sec", "--from-literal=data=s3cret")
    kubectl.run("-n", ns, "create", "configmap", "cfg", "--from-literal=key=value")
    script = ("stat -L -c '%n %g %a' /secret/data /config/key /projected/key /downward/labels /scratch "
              "> /dev/termination-log; touch /scratch/new && stat -c '%n %g %a' /scratch/new >> /dev/termination-log")
    mounts = [{"name": n, "mountPath": f"/{n}"} for n in ("secret", "config", "projected", "downward", "scratch")]
    got = reports(kubectl, ns, {"metadata": {"name": "fsgroup", "labels": {"app": "x"}}, "spec": {
        "securityContext": {"runAsUser": 1001, "fsGroup": 4004},
        "containers": [sh("c", script, volumeMounts=mounts)],
        "volumes": [
            {"name": "secret", "secret": {"secretName": "sec", "defaultMode": 0o440}},
            {"name": "config", "configMap": {"name": "cfg"}},
            {"name": "projected", "projected": {"sources": [{"configMap": {"name": "cfg"}}], "defaultMode": 0o400}},
            {"name": "downward", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"name": "scratch", "emptyDir": {}}]}})
    found = {line.split()[0]: tuple(line.split()[1:]) for line in got["c"].splitlines()}
    assert found == {
        "/secret/data": ("4004", "440"),  # defaultMode kept, readable by the group
        "/config/key": ("4004", "644"),
        "/projected/key": ("4004", "440"),  # 0400 gains group read
        "/downward/labels": ("4004", "644"),
        "/scratch": ("4004", "2777"),  # setgid: new files take the group
        "/scratch/new": ("4004", "644"),
    }, got["c"]


def test_no_new_privileges_and_read_only_root(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str) -> None:
    privs = "grep NoNewPrivs /proc/self/status > /dev/termination-log"
    got = reports(kubectl, unique_ns, {"metadata": {"name": "privs"}, "spec": {"containers": [
        sh("no-escalation", privs, securityContext={"allowPrivilegeEscalation": False}),
        sh("default", privs),
        sh("read-only", "touch /x 2> /dev/termination-log; echo rc=$? >> /dev/termination-log",
           securityContext={"readOnlyRootFilesystem": True}),
        sh("writable", "touch /x; echo rc=$? > /dev/termination-log")]}})
    assert got["no-escalation"].split() == ["NoNewPrivs:", "1"]
    assert got["default"].split() == ["NoNewPrivs:", "0"]
    assert "Read-only file system" in got["read-only"] and got["read-only"].endswith("rc=1")
    assert got["writable"] == "rc=0"


def test_run_as_non_root_refuses_root(kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str) -> None:
    ns = unique_ns
    apply(kubectl, ns, {"metadata": {"name": "nonroot"}, "spec": {
        "securityContext": {"runAsNonRoot": True},
        "containers": [sh("image-user", "sleep 3600"),  # busybox names no user: it would run as root
                       sh("explicit-root", "sleep 3600", securityContext={"runAsUser": 0}),
                       sh("explicit-user", "sleep 3600", securityContext={"runAsUser": 1234})]}})

    def settled() -> dict[str, dict[str, Any]] | None:
        st = status(kubectl, ns, "nonroot")
        by_name = {c["name"]: c["state"] for c in st.get("containerStatuses") or []}
        if (by_name.get("explicit-user") or {}).get("running") and all(
                (by_name.get(n) or {}).get("waiting", {}).get("reason") == "CreateContainerConfigError"
                for n in ("image-user", "explicit-root")):
            return by_name
        return None

    states = wait(settled)
    uid = kubectl.json("-n", ns, "get", "pod", "nonroot")["metadata"]["uid"]
    pod_text = f"nonroot_{ns}({uid})"
    assert states["image-user"]["waiting"]["message"] == (
        f'container has runAsNonRoot and image will run as root (pod: "{pod_text}", container: image-user)')
    assert states["explicit-root"]["waiting"]["message"] == (
        f'container\'s runAsUser breaks non-root policy (pod: "{pod_text}", container: explicit-root)')


def test_each_restart_keeps_its_own_message_and_old_ones_are_collected(
    kubelet: KubeletProcess, kubectl: Kubectl, unique_ns: str
) -> None:
    ns = unique_ns
    apply(kubectl, ns, {"metadata": {"name": "crashing"}, "spec": {"containers": [
        sh("c", "echo -n run-$(cat /proc/sys/kernel/random/uuid) > /dev/termination-log; exit 1")]}})
    cs = wait(lambda: (st := status(kubectl, ns, "crashing")).get("containerStatuses") and
              st["containerStatuses"][0]["restartCount"] >= 3 and st["containerStatuses"][0], timeout=150)
    last = cs["lastState"]["terminated"]["message"]
    current = (cs["state"].get("terminated") or {}).get("message")
    assert last.startswith("run-") and last != current
    uid = kubectl.json("-n", ns, "get", "pod", "crashing")["metadata"]["uid"]
    files = list((kubelet.base / "kubelet" / "pods" / uid / "containers" / "c").glob("termination-log.*"))
    assert 2 <= len(files) <= 3, files  # the two instances kept, and perhaps the one being started
