"""Pod status and phase as upstream's kubelet computes them."""

from __future__ import annotations

from kubelet_agent.cri.types import CONTAINER_EXITED, CONTAINER_RUNNING, ContainerInfo, SandboxInfo
from kubelet_agent.pods.status import build_status, same_status

SEC = 1_000_000_000


def pod(policy: str = "Always", init: bool = False) -> dict:
    spec: dict = {"restartPolicy": policy, "containers": [{"name": "a", "image": "busybox"}]}
    if init:
        spec["initContainers"] = [{"name": "i", "image": "busybox"}]
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec}


def container(name: str, state: str, attempt: int = 0, code: int = 0) -> ContainerInfo:
    return ContainerInfo(f"id-{name}-{attempt}", "s", name, attempt, state, "docker.io/library/busybox:latest",
                         "sha256:abc", 1 * SEC, 2 * SEC, 3 * SEC if state == CONTAINER_EXITED else 0, code)


SANDBOX = SandboxInfo("s", "p", "ns", "u", 0, True, "10.0.0.5")


def status(p: dict, containers: list[ContainerInfo], **kw: object) -> dict:
    args: dict = {"sandbox": SANDBOX, "containers": containers, "waiting": {}, "ready": {}, "started": {},
                  "host_ips": ["192.0.2.1"], "runtime_name": "containerd", "old": {}}
    args.update(kw)
    return build_status(p, **args)


def test_running_and_ready() -> None:
    c = container("a", CONTAINER_RUNNING)
    s = status(pod(), [c], ready={c.id: True}, started={c.id: True})
    assert s["phase"] == "Running"
    assert [x["type"] for x in s["conditions"]] == ["PodReadyToStartContainers", "Initialized", "Ready",
                                                    "ContainersReady", "PodScheduled"]
    assert all(x["status"] == "True" for x in s["conditions"])
    cs = s["containerStatuses"][0]
    assert cs["containerID"] == "containerd://id-a-0" and cs["state"] == {"running": {"startedAt":
                                                                                       "1970-01-01T00:00:02Z"}}
    assert s["podIPs"] == [{"ip": "10.0.0.5"}] and s["hostIPs"] == [{"ip": "192.0.2.1"}]


def test_not_ready_condition_message() -> None:
    s = status(pod(), [container("a", CONTAINER_RUNNING)])
    ready = next(c for c in s["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "ContainersNotReady" and ready["message"] == "containers with unready status: [a]"


def test_crash_loop_keeps_running_phase_and_last_state() -> None:
    dead = container("a", CONTAINER_EXITED, attempt=3, code=1)
    s = status(pod(), [dead], waiting={"a": ("CrashLoopBackOff", "back-off 40s")})
    cs = s["containerStatuses"][0]
    assert s["phase"] == "Running"
    assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff" and cs["restartCount"] == 3
    assert cs["lastState"]["terminated"]["exitCode"] == 1 and cs["lastState"]["terminated"]["reason"] == "Error"


def test_never_policy_phases() -> None:
    assert status(pod("Never"), [container("a", CONTAINER_EXITED, code=0)])["phase"] == "Succeeded"
    assert status(pod("Never"), [container("a", CONTAINER_EXITED, code=2)])["phase"] == "Failed"
    assert status(pod("OnFailure"), [container("a", CONTAINER_EXITED, code=2)])["phase"] == "Running"


def test_init_pending_then_initialized() -> None:
    s = status(pod(init=True), [container("i", CONTAINER_RUNNING)])
    assert s["phase"] == "Pending"
    assert s["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    init = next(c for c in s["conditions"] if c["type"] == "Initialized")
    assert init["message"] == "containers with incomplete status: [i]"
    s = status(pod(init=True), [container("i", CONTAINER_EXITED)])
    assert s["initContainerStatuses"][0]["ready"] is True
    assert s["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"


def test_transition_time_kept_when_unchanged() -> None:
    c = container("a", CONTAINER_RUNNING)
    old = {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}
    s = status(pod(), [c], ready={c.id: True}, old=old)
    assert next(x for x in s["conditions"] if x["type"] == "Ready")["lastTransitionTime"] == "2020-01-01T00:00:00Z"
    assert same_status(s, dict(s)) and not same_status(s, {**s, "phase": "Pending"})


def sidecar_pod() -> dict:
    p = pod(policy="Never")
    p["spec"]["initContainers"] = [{"name": "side", "image": "busybox", "restartPolicy": "Always",
                                    "startupProbe": {"tcpSocket": {"port": 80}}}]
    return p


def test_a_sidecar_initializes_the_pod_once_started_and_counts_for_readiness() -> None:
    side = container("side", CONTAINER_RUNNING)
    s = status(sidecar_pod(), [side], started={side.id: False})
    assert s["phase"] == "Pending"
    assert {c["type"]: c["status"] for c in s["conditions"]}["Initialized"] == "False"
    app = container("a", CONTAINER_RUNNING)
    s = status(sidecar_pod(), [side, app], started={side.id: True, app.id: True}, ready={app.id: True})
    assert s["phase"] == "Running"
    conds = {c["type"]: c for c in s["conditions"]}
    assert conds["Initialized"]["status"] == "True"
    assert conds["Ready"]["status"] == "False" and "side" in conds["Ready"]["message"]
    entry = s["initContainerStatuses"][0]
    assert entry["started"] and entry["state"]["running"] and not entry["ready"]


def test_the_pod_finishes_with_its_app_containers_whatever_its_sidecar_does() -> None:
    side = container("side", CONTAINER_RUNNING)
    s = status(sidecar_pod(), [side, container("a", CONTAINER_EXITED, code=0)], started={side.id: True})
    assert s["phase"] == "Succeeded"
