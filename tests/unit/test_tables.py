"""Table rendering against what upstream's printers (pkg/printers/internalversion) print.

Every expectation below was worked out from upstream's Go source (printers.go,
duration.HumanDuration, rest/table.go, the CRD table convertor), not from this
implementation's output.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from apiserver.endpoints.printers import tables
from services.api.catalog import BUILTIN, Resource

NOW = datetime(2024, 6, 1, 12, 0, 0, tzinfo=UTC)


def ts(**ago: float) -> str:
    """An RFC 3339 timestamp `ago` before NOW."""
    return (NOW - timedelta(**ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def res(group: str, plural: str, version: str | None = None) -> Resource:
    for r in BUILTIN:
        if r.group == group and r.plural == plural and (version is None or r.version == version):
            return r
    raise LookupError(plural)


def meta(name: str = "x", age: timedelta = timedelta(minutes=5), **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": "default", "creationTimestamp": ts(seconds=age.total_seconds()), **extra}


def cells(r: Resource, obj: dict[str, Any]) -> list[Any]:
    return tables.to_table(r, [obj], now=NOW)["rows"][0]["cells"]


def names(r: Resource) -> list[tuple[str, int]]:
    return [(c["name"], c["priority"]) for c in tables.column_definitions(r)]


# ---------------------------------------------------------------- durations


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (1, "1s"), (70, "70s"), (119, "119s"), (120, "2m"), (200, "3m20s"), (599, "9m59s"),
    (600, "10m"), (179 * 60 + 59, "179m"), (3 * 3600, "3h"), (3 * 3600 + 30 * 60, "3h30m"),
    (8 * 3600 - 1, "7h59m"), (8 * 3600, "8h"), (47 * 3600, "47h"), (48 * 3600, "2d"), (51 * 3600, "2d3h"),
    (8 * 86400, "8d"), (729 * 86400, "729d"), (730 * 86400, "2y"), (750 * 86400, "2y20d"),
    (8 * 365 * 86400, "8y"), (-1.5, "0s"), (-2, "<invalid>"),
])
def test_human_duration(seconds: float, text: str) -> None:
    assert tables.human_duration(seconds) == text


def test_age_unknown_and_invalid() -> None:
    ns = res("", "namespaces")
    assert cells(ns, {"metadata": {"name": "a"}, "status": {"phase": "Active"}})[2] == "<unknown>"
    future = {"metadata": {"name": "a", "creationTimestamp": ts(seconds=-3600)}, "status": {"phase": "Active"}}
    assert cells(ns, future)[2] == "<invalid>"


# ---------------------------------------------------------------- pods

PODS = res("", "pods")


def pod(containers: list[dict[str, Any]], statuses: list[dict[str, Any]], phase: str = "Running",
        init: list[dict[str, Any]] | None = None, init_statuses: list[dict[str, Any]] | None = None,
        conditions: list[dict[str, Any]] | None = None, **metadata: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    status: dict[str, Any] = {"phase": phase, "containerStatuses": statuses}
    if init is not None:
        spec["initContainers"] = init
    if init_statuses is not None:
        status["initContainerStatuses"] = init_statuses
    if conditions is not None:
        status["conditions"] = conditions
    return {"metadata": meta("p", timedelta(hours=1), **metadata), "spec": spec, "status": status}


RUNNING = {"running": {"startedAt": ts(minutes=50)}}


def test_pod_columns() -> None:
    assert names(PODS) == [("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0), ("IP", 1),
                           ("Node", 1), ("Nominated Node", 1), ("Readiness Gates", 1)]
    cols = tables.column_definitions(PODS)
    assert cols[0]["format"] == "name" and cols[1]["format"] == ""
    assert cols[3]["type"] == "string"
    assert cols[0]["description"].startswith("Name must be unique within a namespace.")
    assert cols[4]["description"].startswith("CreationTimestamp is a timestamp representing the server time")
    assert cols[5]["description"].startswith("podIP address allocated to the pod.")


def test_pod_running_with_restart_and_wide_cells() -> None:
    p = pod([{"name": "a"}, {"name": "b"}], [
        {"name": "a", "ready": True, "restartCount": 2, "state": RUNNING,
         "lastState": {"terminated": {"exitCode": 1, "finishedAt": ts(minutes=3, seconds=20)}}},
        {"name": "b", "ready": False, "restartCount": 1, "state": RUNNING,
         "lastState": {"terminated": {"exitCode": 1, "finishedAt": ts(minutes=30)}}},
    ])
    p["spec"]["nodeName"] = "node-1"
    p["spec"]["readinessGates"] = [{"conditionType": "g1"}, {"conditionType": "g2"}]
    p["status"]["podIP"] = "10.1.2.3"
    p["status"]["conditions"] = [{"type": "g1", "status": "True"}, {"type": "g2", "status": "False"}]
    assert cells(PODS, p) == ["p", "1/2", "Running", "3 (3m20s ago)", "60m", "10.1.2.3", "node-1", "<none>",
                              "1/2"]


def test_pod_pending_without_statuses() -> None:
    p = pod([{"name": "a"}], [], phase="Pending")
    assert cells(PODS, p)[:5] == ["p", "0/1", "Pending", "0", "60m"]
    assert cells(PODS, p)[5:] == ["<none>", "<none>", "<none>", "<none>"]


def test_pod_ip_from_pod_ips_and_nominated_node() -> None:
    p = pod([{"name": "a"}], [], phase="Pending")
    p["status"]["podIPs"] = [{"ip": "fd00::5"}, {"ip": "10.0.0.5"}]
    p["status"]["nominatedNodeName"] = "n2"
    assert cells(PODS, p)[5:8] == ["fd00::5", "<none>", "n2"]


@pytest.mark.parametrize(("state", "reason"), [
    ({"waiting": {"reason": "ContainerCreating"}}, "ContainerCreating"),
    ({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}, "CrashLoopBackOff"),
    ({"waiting": {"reason": "ErrImagePull"}}, "ErrImagePull"),
    ({"terminated": {"exitCode": 137, "reason": "OOMKilled"}}, "OOMKilled"),
    ({"terminated": {"exitCode": 0, "reason": "Completed"}}, "Completed"),
    ({"terminated": {"exitCode": 1, "signal": 9}}, "Signal:9"),
    ({"terminated": {"exitCode": 137}}, "ExitCode:137"),
    ({"waiting": {}}, "Running"),
])
def test_pod_container_state_reasons(state: dict[str, Any], reason: str) -> None:
    p = pod([{"name": "a"}], [{"name": "a", "ready": False, "restartCount": 0, "state": state}])
    assert cells(PODS, p)[1:4] == ["0/1", reason, "0"]


def test_pod_first_container_reason_wins() -> None:
    # Statuses are walked last to first, so the first container's reason is what remains.
    p = pod([{"name": "a"}, {"name": "b"}], [
        {"name": "a", "state": {"waiting": {"reason": "ImagePullBackOff"}}},
        {"name": "b", "state": {"waiting": {"reason": "ContainerCreating"}}},
    ], phase="Pending")
    assert cells(PODS, p)[2] == "ImagePullBackOff"


@pytest.mark.parametrize(("ready_condition", "reason"), [("True", "Running"), ("False", "NotReady")])
def test_pod_completed_container_with_running_sibling(ready_condition: str, reason: str) -> None:
    p = pod([{"name": "a"}, {"name": "b"}], [
        {"name": "a", "ready": False, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
        {"name": "b", "ready": True, "state": RUNNING},
    ], conditions=[{"type": "Ready", "status": ready_condition}])
    assert cells(PODS, p)[1:3] == ["1/2", reason]


INIT = [{"name": "init-a"}, {"name": "init-b"}]


@pytest.mark.parametrize(("init_statuses", "reason"), [
    ([{"name": "init-a", "state": {"waiting": {"reason": "PodInitializing"}}}], "Init:0/2"),
    ([{"name": "init-a", "state": {"running": {}}}], "Init:0/2"),
    ([{"name": "init-a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
      {"name": "init-b", "state": {"running": {}}}], "Init:1/2"),
    ([{"name": "init-a", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}], "Init:Error"),
    ([{"name": "init-a", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}], "Init:CrashLoopBackOff"),
    ([{"name": "init-a", "state": {"terminated": {"exitCode": 1}}}], "Init:ExitCode:1"),
    ([{"name": "init-a", "state": {"terminated": {"exitCode": 1, "signal": 9}}}], "Init:Signal:9"),
])
def test_pod_init_container_states(init_statuses: list[dict[str, Any]], reason: str) -> None:
    p = pod([{"name": "app"}], [{"name": "app", "state": {"waiting": {"reason": "PodInitializing"}}}],
            phase="Pending", init=INIT, init_statuses=init_statuses)
    assert cells(PODS, p)[1:3] == ["0/1", reason]


def test_pod_init_restarts_counted_while_initializing() -> None:
    p = pod([{"name": "app"}], [{"name": "app", "restartCount": 7, "state": {"waiting": {"reason": "X"}}}],
            phase="Pending", init=INIT, init_statuses=[
                {"name": "init-a", "restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": ts(seconds=20)}}}])
    # Only init restarts count while the pod is still initializing.
    assert cells(PODS, p)[2:4] == ["Init:CrashLoopBackOff", "4 (20s ago)"]


def test_pod_restartable_init_container_counts_as_ready() -> None:
    p = pod([{"name": "app"}], [{"name": "app", "ready": True, "restartCount": 1, "state": RUNNING}],
            init=[{"name": "sidecar", "restartPolicy": "Always"}],
            init_statuses=[{"name": "sidecar", "ready": True, "started": True, "restartCount": 2, "state": RUNNING}],
            conditions=[{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}])
    assert cells(PODS, p)[1:4] == ["2/2", "Running", "3"]


def test_pod_initialized_main_container_initializing() -> None:
    p = pod([{"name": "app"}], [{"name": "app", "state": {"waiting": {"reason": "PodInitializing"}}}],
            phase="Pending", init=INIT, init_statuses=[{"name": n, "state": {"terminated": {"exitCode": 0}}}
                                                       for n in ("init-a", "init-b")],
            conditions=[{"type": "Initialized", "status": "True"}])
    assert cells(PODS, p)[1:4] == ["0/1", "PodInitializing", "0"]


def test_pod_sidecar_not_yet_started_holds_initialization() -> None:
    p = pod([{"name": "app"}], [{"name": "app", "state": {"waiting": {"reason": "PodInitializing"}}}],
            phase="Pending", init=[{"name": "sidecar", "restartPolicy": "Always"}, {"name": "migrate"}],
            init_statuses=[{"name": "sidecar", "started": False, "state": {"running": {}}},
                           {"name": "migrate", "state": {"waiting": {"reason": "PodInitializing"}}}])
    assert cells(PODS, p)[1:3] == ["0/2", "Init:0/2"]
    started = pod([{"name": "app"}], [{"name": "app", "state": {"waiting": {"reason": "PodInitializing"}}}],
                  phase="Pending", init=[{"name": "sidecar", "restartPolicy": "Always"}, {"name": "migrate"}],
                  init_statuses=[{"name": "sidecar", "started": True, "ready": True, "state": {"running": {}}},
                                 {"name": "migrate", "state": {"running": {}}}])
    assert cells(PODS, started)[1:3] == ["1/2", "Init:1/2"]


def test_pod_scheduling_gated() -> None:
    p = pod([{"name": "a"}], [], phase="Pending",
            conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}])
    assert cells(PODS, p)[2] == "SchedulingGated"


def test_pod_status_reason_overrides_phase() -> None:
    p = pod([{"name": "a"}], [], phase="Failed")
    p["status"]["reason"] = "Evicted"
    assert cells(PODS, p)[2] == "Evicted"


def test_pod_deletion() -> None:
    running = pod([{"name": "a"}], [{"name": "a", "ready": True, "state": RUNNING}],
                  deletionTimestamp=ts(seconds=5))
    assert cells(PODS, running)[2] == "Terminating"
    lost = pod([{"name": "a"}], [{"name": "a", "ready": True, "state": RUNNING}], deletionTimestamp=ts(seconds=5))
    lost["status"]["reason"] = "NodeLost"
    assert cells(PODS, lost)[2] == "Unknown"
    done = pod([{"name": "a"}], [{"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
               phase="Succeeded", deletionTimestamp=ts(seconds=5))
    assert cells(PODS, done)[2] == "Completed"


def test_pod_row_conditions() -> None:
    ok = pod([{"name": "a"}], [{"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
             phase="Succeeded")
    bad = pod([{"name": "a"}], [{"name": "a", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}],
              phase="Failed")
    live = pod([{"name": "a"}], [{"name": "a", "ready": True, "state": RUNNING}])
    rows = tables.to_table(PODS, [ok, bad, live], now=NOW)["rows"]
    assert rows[0]["conditions"] == [{"type": "Completed", "status": "True", "reason": "Succeeded",
                                      "message": "The pod has completed successfully."}]
    assert rows[1]["conditions"] == [{"type": "Completed", "status": "True", "reason": "Failed",
                                      "message": "The pod failed."}]
    assert "conditions" not in rows[2]


# ---------------------------------------------------------------- workloads

TEMPLATE = {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"}, {"name": "side", "image": "busybox"}]}}
SELECTOR = {"matchLabels": {"app": "web", "tier": "fe"},
            "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]},
                                 {"key": "canary", "operator": "DoesNotExist"}]}


def test_deployment() -> None:
    d = {"metadata": meta("web", timedelta(days=2, hours=3)),
         "spec": {"replicas": 3, "selector": SELECTOR, "template": TEMPLATE},
         "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}}
    assert names(res("apps", "deployments")) == [("Name", 0), ("Ready", 0), ("Up-to-date", 0), ("Available", 0),
                                                 ("Age", 0), ("Containers", 1), ("Images", 1), ("Selector", 1)]
    assert cells(res("apps", "deployments"), d) == [
        "web", "2/3", 3, 2, "2d3h", "nginx,side", "nginx:1.25,busybox",
        "app=web,!canary,env in (dev,prod),tier=fe"]


def test_deployment_empty_status() -> None:
    d = {"metadata": meta("web"), "spec": {"replicas": 0, "selector": {"matchLabels": {"a": "b"}},
                                           "template": TEMPLATE}}
    assert cells(res("apps", "deployments"), d)[1:4] == ["0/0", 0, 0]


def test_replicaset_and_rc() -> None:
    rs = {"metadata": meta("web-abc"), "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                                                "template": TEMPLATE},
          "status": {"replicas": 2, "readyReplicas": 1}}
    assert cells(res("apps", "replicasets"), rs) == ["web-abc", 2, 2, 1, "5m", "nginx,side", "nginx:1.25,busybox",
                                                     "app=web"]
    rc = {"metadata": meta("old"), "spec": {"replicas": 1, "selector": {"app": "web", "a": "b"},
                                            "template": TEMPLATE}, "status": {"replicas": 1}}
    assert cells(res("", "replicationcontrollers"), rc) == ["old", 1, 1, 0, "5m", "nginx,side",
                                                            "nginx:1.25,busybox", "a=b,app=web"]


def test_statefulset_and_daemonset() -> None:
    sts = {"metadata": meta("db"), "spec": {"replicas": 3, "template": TEMPLATE}, "status": {"readyReplicas": 3}}
    assert names(res("apps", "statefulsets")) == [("Name", 0), ("Ready", 0), ("Age", 0), ("Containers", 1),
                                                  ("Images", 1)]
    assert cells(res("apps", "statefulsets"), sts) == ["db", "3/3", "5m", "nginx,side", "nginx:1.25,busybox"]
    ds = {"metadata": meta("agent"),
          "spec": {"selector": {"matchLabels": {"app": "agent"}},
                   "template": {"spec": {"nodeSelector": {"kubernetes.io/os": "linux"},
                                         "containers": [{"name": "a", "image": "agent:1"}]}}},
          "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2,
                     "updatedNumberScheduled": 3, "numberAvailable": 2}}
    assert cells(res("apps", "daemonsets"), ds) == ["agent", 3, 3, 2, 3, 2, "kubernetes.io/os=linux", "5m", "a",
                                                    "agent:1", "app=agent"]
    ds["spec"]["template"]["spec"].pop("nodeSelector")
    assert cells(res("apps", "daemonsets"), ds)[6] == "<none>"


def test_job_status_completions_duration() -> None:
    jobs = res("batch", "jobs")
    assert names(jobs) == [("Name", 0), ("Status", 0), ("Completions", 0), ("Duration", 0), ("Age", 0),
                           ("Containers", 1), ("Images", 1), ("Selector", 1)]
    base = {"metadata": meta("pi", timedelta(minutes=10)),
            "spec": {"completions": 1, "parallelism": 1, "template": TEMPLATE,
                     "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}}}}
    done = {**base, "status": {"succeeded": 1, "startTime": ts(minutes=10), "completionTime": ts(minutes=9, seconds=5),
                               "conditions": [{"type": "Complete", "status": "True"}]}}
    assert cells(jobs, done) == ["pi", "Complete", "1/1", "55s", "10m", "nginx,side", "nginx:1.25,busybox",
                                 "batch.kubernetes.io/controller-uid=u1"]
    running = {**base, "status": {"startTime": ts(minutes=4, seconds=30), "active": 1}}
    assert cells(jobs, running)[1:4] == ["Running", "0/1", "4m30s"]
    pending = {**base, "status": {}}
    assert cells(jobs, pending)[1:4] == ["Running", "0/1", ""]
    failed = {**base, "status": {"failed": 1, "conditions": [{"type": "FailureTarget", "status": "True"},
                                                             {"type": "Failed", "status": "True"}]}}
    assert cells(jobs, failed)[1] == "Failed"
    suspended = {**base, "status": {"conditions": [{"type": "Suspended", "status": "True"}]}}
    assert cells(jobs, suspended)[1] == "Suspended"
    deleting = {**base, "metadata": {**base["metadata"], "deletionTimestamp": ts(seconds=1)}, "status": {}}
    assert cells(jobs, deleting)[1] == "Terminating"
    parallel = {**base, "spec": {**base["spec"], "completions": None, "parallelism": 3}, "status": {"succeeded": 2}}
    assert cells(jobs, parallel)[2] == "2/1 of 3"


@pytest.mark.parametrize(("conditions", "state"), [
    ([{"type": "SuccessCriteriaMet", "status": "True"}], "SuccessCriteriaMet"),
    ([{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}], "Complete"),
    ([{"type": "FailureTarget", "status": "True"}], "FailureTarget"),
    ([{"type": "FailureTarget", "status": "False"}, {"type": "SuccessCriteriaMet", "status": "False"}], "Running"),
])
def test_job_status_of_success_policy_and_failure_target(conditions: list[dict[str, str]], state: str) -> None:
    job = {"metadata": meta("j", timedelta(minutes=1)), "spec": {"completions": 3, "template": TEMPLATE},
           "status": {"conditions": conditions}}
    assert cells(res("batch", "jobs"), job)[1] == state


def test_cronjob() -> None:
    cj = {"metadata": meta("hello", timedelta(days=10)),
          "spec": {"schedule": "*/5 * * * *", "suspend": False,
                   "jobTemplate": {"spec": {"template": TEMPLATE}}},
          "status": {"active": [{"name": "hello-1"}], "lastScheduleTime": ts(minutes=2)}}
    assert names(res("batch", "cronjobs"))[:7] == [("Name", 0), ("Schedule", 0), ("Timezone", 0), ("Suspend", 0),
                                                   ("Active", 0), ("Last Schedule", 0), ("Age", 0)]
    assert cells(res("batch", "cronjobs"), cj) == ["hello", "*/5 * * * *", "<none>", "False", 1, "2m", "10d",
                                                   "nginx,side", "nginx:1.25,busybox", "<none>"]
    cj["spec"]["timeZone"] = "Etc/UTC"
    cj["status"] = {}
    assert cells(res("batch", "cronjobs"), cj)[2:6] == ["Etc/UTC", "False", 0, "<none>"]


# ---------------------------------------------------------------- services and networking

SVC = res("", "services")


def test_service_cluster_ip() -> None:
    svc = {"metadata": meta("web"), "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10",
                                             "clusterIPs": ["10.96.0.10"], "selector": {"app": "web"},
                                             "ports": [{"port": 80, "protocol": "TCP"},
                                                       {"port": 53, "protocol": "UDP"}]}}
    assert names(SVC) == [("Name", 0), ("Type", 0), ("Cluster-IP", 0), ("External-IP", 0), ("Port(s)", 0),
                          ("Age", 0), ("Selector", 1)]
    assert cells(SVC, svc) == ["web", "ClusterIP", "10.96.0.10", "<none>", "80/TCP,53/UDP", "5m", "app=web"]


def test_service_node_port_headless_and_external_ips() -> None:
    np = {"metadata": meta("np"), "spec": {"type": "NodePort", "clusterIP": "10.96.1.1",
                                           "externalIPs": ["1.2.3.4", "5.6.7.8"],
                                           "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}]}}
    assert cells(SVC, np)[1:5] == ["NodePort", "10.96.1.1", "1.2.3.4,5.6.7.8", "80:30080/TCP"]
    headless = {"metadata": meta("h"), "spec": {"type": "ClusterIP", "clusterIP": "None"}}
    assert cells(SVC, headless)[2:5] == ["None", "<none>", "<none>"]
    assert cells(SVC, headless)[6] == "<none>"


def test_service_load_balancer_and_external_name() -> None:
    lb = {"metadata": meta("lb"), "spec": {"type": "LoadBalancer", "clusterIP": "10.96.2.2",
                                           "ports": [{"port": 443, "nodePort": 31443, "protocol": "TCP"}]}}
    assert cells(SVC, lb)[3] == "<pending>"
    lb["status"] = {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}, {"hostname": "a.example.com"}]}}
    assert cells(SVC, lb)[3] == "203.0.113.9,a.example.com"
    lb["spec"]["externalIPs"] = ["198.51.100.1"]
    assert cells(SVC, lb)[3] == "203.0.113.9,a.example.com,198.51.100.1"
    en = {"metadata": meta("en"), "spec": {"type": "ExternalName", "externalName": "db.example.com"}}
    assert cells(SVC, en)[1:5] == ["ExternalName", "<none>", "db.example.com", "<none>"]


def test_endpoints_and_slices() -> None:
    ep = {"metadata": meta("web"), "subsets": [{"addresses": [{"ip": f"10.0.0.{i}"} for i in range(1, 5)],
                                                "ports": [{"port": 80}]}]}
    assert cells(res("", "endpoints"), ep) == ["web", "10.0.0.1:80,10.0.0.2:80,10.0.0.3:80 + 1 more...", "5m"]
    v6 = {"metadata": meta("v6"), "subsets": [{"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 53}]}]}
    assert cells(res("", "endpoints"), v6)[1] == "[fd00::1]:53"
    assert cells(res("", "endpoints"), {"metadata": meta("none")})[1] == "<none>"
    eps = {"metadata": meta("web-x"), "addressType": "IPv4", "ports": [{"port": 80, "name": "http"}, {"name": "x"}],
           "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}]}
    assert cells(res("discovery.k8s.io", "endpointslices"), eps) == ["web-x", "IPv4", "80,x", "10.0.0.1,10.0.0.2",
                                                                     "5m"]
    empty = {"metadata": meta("e"), "addressType": "IPv4"}
    assert cells(res("discovery.k8s.io", "endpointslices"), empty)[2:4] == ["<unset>", "<unset>"]


def test_ingress_and_class() -> None:
    ing = {"metadata": meta("ing"), "spec": {"ingressClassName": "nginx",
                                             "rules": [{"host": "a.com"}, {"host": "b.com"}, {}, {"host": "c.com"},
                                                       {"host": "d.com"}],
                                             "tls": [{"hosts": ["a.com"]}]},
           "status": {"loadBalancer": {"ingress": [{"ip": "1.1.1.1"}]}}}
    assert cells(res("networking.k8s.io", "ingresses"), ing) == ["ing", "nginx", "a.com,b.com,c.com + 2 more...",
                                                                 "1.1.1.1", "80, 443", "5m"]
    bare = {"metadata": meta("bare"), "spec": {"defaultBackend": {"service": {"name": "s"}}}}
    assert cells(res("networking.k8s.io", "ingresses"), bare) == ["bare", "<none>", "*", "", "80", "5m"]
    ic = {"metadata": meta("nginx"), "spec": {"controller": "k8s.io/ingress-nginx",
                                              "parameters": {"apiGroup": "k8s.example.com", "kind": "Params",
                                                             "name": "p"}}}
    assert cells(res("networking.k8s.io", "ingressclasses"), ic) == [
        "nginx", "k8s.io/ingress-nginx", "Params.k8s.example.com/p", "5m"]


def test_network_policy() -> None:
    npol = {"metadata": meta("deny"), "spec": {"podSelector": {}}}
    assert cells(res("networking.k8s.io", "networkpolicies"), npol) == ["deny", "<none>", "5m"]
    npol["spec"]["podSelector"] = {"matchLabels": {"role": "db"}}
    assert cells(res("networking.k8s.io", "networkpolicies"), npol)[1] == "role=db"


# ---------------------------------------------------------------- cluster objects


def test_nodes() -> None:
    nodes = res("", "nodes")
    node = {"metadata": meta("n1", timedelta(days=30), labels={"node-role.kubernetes.io/control-plane": "",
                                                               "node-role.kubernetes.io/worker": "",
                                                               "kubernetes.io/hostname": "n1"}),
            "spec": {},
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
                                      {"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "InternalIP", "address": "192.168.1.10"},
                                     {"type": "InternalIP", "address": "192.168.1.11"},
                                     {"type": "Hostname", "address": "n1"}],
                       "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian GNU/Linux 12",
                                    "kernelVersion": "6.1.0", "containerRuntimeVersion": "containerd://1.7.0"}}}
    assert cells(nodes, node) == ["n1", "Ready", "control-plane,worker", "30d", "v1.32.0", "192.168.1.10", "<none>",
                                  "Debian GNU/Linux 12", "6.1.0", "containerd://1.7.0"]
    node["spec"]["unschedulable"] = True
    assert cells(nodes, node)[1] == "Ready,SchedulingDisabled"
    node["status"]["conditions"][1]["status"] = "Unknown"
    assert cells(nodes, node)[1] == "NotReady,SchedulingDisabled"
    bare = {"metadata": meta("n2", labels={"kubernetes.io/role": "infra"}), "status": {}}
    assert cells(nodes, bare) == ["n2", "Unknown", "infra", "5m", "", "<none>", "<none>", "<unknown>", "<unknown>",
                                  "<unknown>"]
    assert cells(nodes, {"metadata": meta("n3"), "status": {}})[2] == "<none>"


def test_namespace_configmap_secret_serviceaccount() -> None:
    assert cells(res("", "namespaces"), {"metadata": meta("kube-system"), "status": {"phase": "Active"}}) == [
        "kube-system", "Active", "5m"]
    assert cells(res("", "namespaces"), {"metadata": meta("old"), "status": {"phase": "Terminating"}})[1] == \
        "Terminating"
    cm = {"metadata": meta("cfg"), "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}}
    assert cells(res("", "configmaps"), cm) == ["cfg", 3, "5m"]
    sec = {"metadata": meta("tls"), "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}}
    assert names(res("", "secrets")) == [("Name", 0), ("Type", 0), ("Data", 0), ("Age", 0)]
    assert cells(res("", "secrets"), sec) == ["tls", "kubernetes.io/tls", 2, "5m"]
    sa = {"metadata": meta("default")}
    assert names(res("", "serviceaccounts")) == [("Name", 0), ("Secrets", 0), ("Age", 0)]
    assert cells(res("", "serviceaccounts"), sa) == ["default", 0, "5m"]


def test_core_events() -> None:
    events = res("", "events", "v1")
    assert names(events) == [("Last Seen", 0), ("Type", 0), ("Reason", 0), ("Object", 0), ("Subobject", 1),
                             ("Source", 1), ("Message", 0), ("First Seen", 1), ("Count", 1), ("Name", 1)]
    ev = {"metadata": meta("p.17a"), "involvedObject": {"kind": "Pod", "name": "p", "fieldPath": "spec.containers{a}"},
          "reason": "Pulled", "message": " Successfully pulled image \n", "type": "Normal",
          "source": {"component": "kubelet", "host": "n1"}, "firstTimestamp": ts(hours=1),
          "lastTimestamp": ts(minutes=2), "count": 4}
    assert cells(events, ev) == ["2m", "Normal", "Pulled", "pod/p", "spec.containers{a}", "kubelet, n1",
                                 "Successfully pulled image", "60m", 4, "p.17a"]
    new_style = {"metadata": meta("e2"), "involvedObject": {"kind": "Node"}, "reason": "R", "type": "Warning",
                 "eventTime": "2024-06-01T11:59:30.123456Z", "reportingController": "ctrl",
                 "series": {"count": 9, "lastObservedTime": "2024-06-01T11:59:50.000000Z"}}
    # 29.88s since eventTime: HumanDuration truncates to whole seconds.
    assert cells(events, new_style) == ["10s", "Warning", "R", "node", "", "ctrl", "", "29s", 9, "e2"]


def test_events_k8s_io_events() -> None:
    events = res("events.k8s.io", "events")
    ev = {"metadata": meta("p.17b"), "regarding": {"kind": "Deployment", "name": "web"}, "reason": "ScalingReplicaSet",
          "note": "Scaled up", "type": "Normal", "eventTime": "2024-06-01T11:55:00.000000Z",
          "reportingController": "deployment-controller", "reportingInstance": "cm-1"}
    assert cells(events, ev) == ["5m", "Normal", "ScalingReplicaSet", "deployment/web", "",
                                 "deployment-controller, cm-1", "Scaled up", "5m", 1, "p.17b"]


def test_volumes() -> None:
    pv = {"metadata": meta("pv1", annotations={"volume.beta.kubernetes.io/storage-class": "slow"}),
          "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce", "ReadWriteOnce"],
                   "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "fast",
                   "claimRef": {"namespace": "default", "name": "data"}, "volumeMode": "Filesystem"},
          "status": {"phase": "Bound"}}
    assert cells(res("", "persistentvolumes"), pv) == ["pv1", "10Gi", "RWO,RWX", "Delete", "Bound", "default/data",
                                                       "slow", "<unset>", "", "5m", "Filesystem"]
    pv["metadata"]["deletionTimestamp"] = ts(seconds=1)
    assert cells(res("", "persistentvolumes"), pv)[4] == "Terminating"
    pvc = {"metadata": meta("data"), "spec": {"storageClassName": "fast", "volumeMode": "Block",
                                              "resources": {"requests": {"storage": "5Gi"}}},
           "status": {"phase": "Pending"}}
    pvcs = res("", "persistentvolumeclaims")
    assert cells(pvcs, pvc) == ["data", "Pending", "", "", "", "fast", "<unset>", "5m", "Block"]
    pvc["spec"]["volumeName"] = "pv1"
    pvc["status"] = {"phase": "Bound", "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOncePod"]}
    assert cells(pvcs, pvc)[1:5] == ["Bound", "pv1", "10Gi", "RWOP"]


def test_storage_and_priority_classes() -> None:
    sc = {"metadata": meta("standard", annotations={"storageclass.kubernetes.io/is-default-class": "true"}),
          "provisioner": "rancher.io/local-path", "reclaimPolicy": "Delete",
          "volumeBindingMode": "WaitForFirstConsumer"}
    assert cells(res("storage.k8s.io", "storageclasses"), sc) == [
        "standard (default)", "rancher.io/local-path", "Delete", "WaitForFirstConsumer", False, "5m"]
    pc = {"metadata": meta("system-cluster-critical"), "value": 2000000000, "preemptionPolicy": "PreemptLowerPriority"}
    assert names(res("scheduling.k8s.io", "priorityclasses")) == [
        ("Name", 0), ("Value", 0), ("Global-Default", 0), ("Age", 0), ("PreemptionPolicy", 0)]
    assert cells(res("scheduling.k8s.io", "priorityclasses"), pc) == [
        "system-cluster-critical", 2000000000, False, "5m", "PreemptLowerPriority"]


def test_leases_bindings_revisions() -> None:
    lease = {"metadata": meta("kube-scheduler"), "spec": {"holderIdentity": "host_1234"}}
    assert cells(res("coordination.k8s.io", "leases"), lease) == ["kube-scheduler", "host_1234", "5m"]
    assert cells(res("coordination.k8s.io", "leases"), {"metadata": meta("l"), "spec": {}})[1] == ""
    rb = {"metadata": meta("rb"), "roleRef": {"kind": "ClusterRole", "name": "view"},
          "subjects": [{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs"},
                       {"kind": "ServiceAccount", "namespace": "ci", "name": "bot"}, {"kind": "User", "name": "bob"}]}
    assert cells(res("rbac.authorization.k8s.io", "rolebindings"), rb) == [
        "rb", "ClusterRole/view", "5m", "alice, bob", "devs", "ci/bot"]
    cr = {"metadata": meta("web-5d4", ownerReferences=[
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "controller": True}]), "revision": 3}
    assert cells(res("apps", "controllerrevisions"), cr) == ["web-5d4", "statefulset.apps/web", 3, "5m"]


def test_quota_pdb_hpa_podtemplate() -> None:
    quota = {"metadata": meta("q"), "status": {
        "hard": {"requests.cpu": "2", "limits.memory": "2Gi", "pods": "10", "limits.cpu": "4"},
        "used": {"requests.cpu": "500m", "pods": "3", "limits.cpu": "1"}}}
    assert cells(res("", "resourcequotas"), quota) == [
        "q", "5m", "pods: 3/10, requests.cpu: 500m/2", "limits.cpu: 1/4, limits.memory: 0/2Gi"]
    pdb = {"metadata": meta("pdb"), "spec": {"minAvailable": "50%"}, "status": {"disruptionsAllowed": 1}}
    assert cells(res("policy", "poddisruptionbudgets"), pdb) == ["pdb", "50%", "N/A", 1, "5m"]
    hpa2 = {"metadata": meta("web"), "spec": {
        "scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 1, "maxReplicas": 10,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                                "averageUtilization": 50}}},
                    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue",
                                                                                   "averageValue": "100Mi"}}},
                    {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"averageValue": "1k"}}}]},
        "status": {"currentReplicas": 2, "currentMetrics": [
            {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 33}}}]}}
    assert cells(res("autoscaling", "horizontalpodautoscalers", "v2"), hpa2) == [
        "web", "Deployment/web", "cpu: 33%/50%, memory: <unknown>/100Mi + 1 more...", "1", 10, 2, "5m"]
    hpa1 = {"metadata": meta("web"), "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"},
                                              "maxReplicas": 4, "targetCPUUtilizationPercentage": 70},
            "status": {"currentReplicas": 1}}
    assert cells(res("autoscaling", "horizontalpodautoscalers", "v1"), hpa1) == [
        "web", "Deployment/web", "cpu: <unknown>/70%", "<unset>", 4, 1, "5m"]
    pt = {"metadata": meta("tmpl"), "template": TEMPLATE}
    assert cells(res("", "podtemplates"), pt) == ["tmpl", "nginx,side", "nginx:1.25,busybox", "app=web"]


# ---------------------------------------------------------------- default and custom tables


def test_default_table_convertor() -> None:
    roles = res("rbac.authorization.k8s.io", "roles")
    cols = tables.column_definitions(roles)
    assert [(c["name"], c["type"], c["format"]) for c in cols] == [("Name", "string", "name"),
                                                                   ("Created At", "date", "")]
    obj = {"metadata": {"name": "r", "creationTimestamp": "2024-05-01T10:20:30Z"}}
    assert cells(roles, obj) == ["r", "2024-05-01T10:20:30Z"]
    assert cells(res("", "limitranges"), {"metadata": {"name": "l"}}) == ["l", "0001-01-01T00:00:00Z"]


CRD_RES = Resource(group="stable.example.com", version="v1", kind="CronTab", plural="crontabs",
                   singular="crontab", namespaced=True, custom=True)


def test_custom_resource_default_age_column() -> None:
    cols = tables.column_definitions(CRD_RES)
    assert [(c["name"], c["type"], c["priority"]) for c in cols] == [("Name", "string", 0), ("Age", "date", 0)]
    assert cols[1]["description"].startswith("CreationTimestamp is a timestamp")
    assert cells(CRD_RES, {"metadata": meta("ct", timedelta(hours=5))}) == ["ct", "5h"]


def test_custom_resource_printer_columns() -> None:
    printer = [
        {"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec"},
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas", "priority": 1},
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
         "description": "readiness"},
        {"name": "Ratio", "type": "number", "jsonPath": ".status.ratio"},
        {"name": "Paused", "type": "boolean", "jsonPath": ".spec.paused"},
        {"name": "Since", "type": "date", "jsonPath": ".status.since"},
        {"name": "Ports", "type": "string", "jsonPath": ".spec.ports"},
        {"name": "First", "type": "string", "jsonPath": ".spec.items[0].name"},
    ]
    cols = tables.column_definitions(CRD_RES, printer)
    assert [c["name"] for c in cols] == ["Name", "Spec", "Replicas", "Ready", "Ratio", "Paused", "Since", "Ports",
                                         "First"]
    assert cols[1]["description"] == "Custom resource definition column (in JSONPath format): .spec.cronSpec"
    assert cols[2]["priority"] == 1 and cols[3]["description"] == "readiness"
    obj = {"metadata": meta("ct"), "spec": {"cronSpec": "* * * * */5", "replicas": 3, "paused": True,
                                            "ports": [80, 443], "items": [{"name": "i0"}, {"name": "i1"}]},
           "status": {"ratio": 2, "since": ts(minutes=3), "conditions": [{"type": "Synced", "status": "True"},
                                                                         {"type": "Ready", "status": "False"}]}}
    table = tables.to_table(CRD_RES, [obj], now=NOW, printer_columns=printer)
    assert table["rows"][0]["cells"] == ["ct", "* * * * */5", 3, "False", 2.0, True, "3m", "[80,443]", "i0"]
    sparse = tables.to_table(CRD_RES, [{"metadata": meta("s")}], now=NOW, printer_columns=printer)
    assert sparse["rows"][0]["cells"] == ["s", None, None, None, None, None, None, None, None]


# ---------------------------------------------------------------- envelope


def test_table_envelope_and_include_object() -> None:
    cm = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": meta("cfg", labels={"a": "b"}), "data": {"k": "v"}}
    cms = res("", "configmaps")
    table = tables.to_table(cms, [cm], list_meta={"resourceVersion": "42"}, now=NOW)
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {"resourceVersion": "42"}
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert table["rows"][0]["object"] == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                          "metadata": cm["metadata"]}
    assert tables.to_table(cms, [cm], include_object="Object", now=NOW)["rows"][0]["object"] is cm
    assert tables.to_table(cms, [cm], include_object="None", now=NOW)["rows"][0]["object"] is None
    later = tables.to_table(cms, [cm], with_columns=False, now=NOW)
    assert not later.get("columnDefinitions") and later["metadata"] == {}
    assert tables.to_table(cms, [], now=NOW)["rows"] == []


def test_column_definitions_are_fresh_copies() -> None:
    cols = tables.column_definitions(res("", "configmaps"))
    cols[0]["name"] = "mutated"
    assert tables.column_definitions(res("", "configmaps"))[0]["name"] == "Name"


def test_partial_object_metadata() -> None:
    a = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "a", "resourceVersion": "7"}, "spec": {}}
    assert tables.partial_object_metadata(a) == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                                 "metadata": {"name": "a", "resourceVersion": "7"}}
    lst = tables.partial_object_metadata_list([a, a], {"resourceVersion": "9", "continue": "c"})
    assert lst["kind"] == "PartialObjectMetadataList" and lst["apiVersion"] == "meta.k8s.io/v1"
    assert lst["metadata"] == {"resourceVersion": "9", "continue": "c"}
    assert [i["metadata"]["name"] for i in lst["items"]] == ["a", "a"]
    assert tables.partial_object_metadata_list([], None)["metadata"] == {}


def test_every_builtin_renders_a_sparse_object() -> None:
    for r in BUILTIN:
        table = tables.to_table(r, [{"metadata": {"name": "n", "creationTimestamp": ts(seconds=30)}}], now=NOW)
        row = table["rows"][0]["cells"]
        assert len(row) == len(table["columnDefinitions"]), r.plural
        assert all(c["description"] for c in table["columnDefinitions"]), r.plural


# ---------------------------------------------------------------- speed


def test_render_10k_pods_speed() -> None:
    pods = []
    for i in range(10_000):
        p = pod([{"name": "app"}, {"name": "side"}], [
            {"name": "app", "ready": True, "restartCount": i % 3, "state": RUNNING,
             "lastState": {"terminated": {"exitCode": 1, "finishedAt": ts(minutes=i % 50)}} if i % 3 else {}},
            {"name": "side", "ready": i % 7 != 0, "restartCount": 0, "state": RUNNING},
        ], conditions=[{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}])
        p["metadata"]["name"] = f"pod-{i}"
        p["metadata"]["creationTimestamp"] = ts(seconds=i)
        p["spec"]["nodeName"] = f"node-{i % 100}"
        p["status"]["podIP"] = f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"
        pods.append(p)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        table = tables.to_table(PODS, pods, now=NOW)
        best = min(best, time.perf_counter() - start)
    print(f"\nrendered 10,000 pods as a Table in {best * 1000:.1f} ms (best of 3)")
    assert len(table["rows"]) == 10_000
    assert table["rows"][7]["cells"][:4] == ["pod-7", "1/2", "Running", "1 (7m ago)"]
