"""Real kubectl v1.32 against the real apiserver: the everyday verbs, checked against what upstream prints."""

from __future__ import annotations

import base64
import ipaddress
import json
import queue
import re
import subprocess
import threading
import time

import pytest
import yaml

from tests.conftest import KUBECTL, Kubectl

STACK = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports:
        - containerPort: 8080
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
  - port: 80
    targetPort: 8080
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  labels: {app: web}
data:
  mode: production
"""


def configmap(name: str, labels: dict[str, str] | None = None, **data: str) -> str:
    meta: dict = {"name": name, **({"labels": labels} if labels else {})}
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})


def pod(name: str, labels: dict[str, str] | None = None, node: str | None = None) -> str:
    spec: dict = {"containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}
    if node:
        spec["nodeName"] = node
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
                           "spec": spec})


def create_cm(kubectl: Kubectl, namespace: str, name: str, **data: str) -> None:
    """Create through `create -f` (a JSON body), leaving the protobuf-bodied generators to their own tests."""
    kubectl.run("create", "-n", namespace, "-f", "-", stdin=configmap(name, **data))


def names(kubectl: Kubectl, *args: str) -> list[str]:
    """`kubectl get ... -o name`, one `kind/name` per line."""
    return kubectl.run("get", *args, "-o", "name").stdout.split()


# Discovery


def test_version_reports_the_server(kubectl: Kubectl) -> None:
    plain = kubectl.run("version")
    assert re.search(r"^Server Version: v1\.\d+\.\d+", plain.stdout, re.M), plain.stdout
    info = json.loads(kubectl.run("version", "-o", "json").stdout)
    server = info["serverVersion"]
    assert server["major"] == "1" and server["gitVersion"].startswith("v1.")
    assert server["platform"] and server["goVersion"] is not None


def test_api_versions(kubectl: Kubectl) -> None:
    versions = kubectl.run("api-versions").stdout.split()
    for gv in ("v1", "apps/v1", "batch/v1", "rbac.authorization.k8s.io/v1", "coordination.k8s.io/v1",
               "networking.k8s.io/v1", "policy/v1", "autoscaling/v2", "discovery.k8s.io/v1",
               "events.k8s.io/v1"):
        assert gv in versions
    assert versions == sorted(versions)


def test_api_resources(kubectl: Kubectl) -> None:
    out = kubectl.run("api-resources").stdout.splitlines()
    assert out[0].split() == ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    rows = {line.split()[0]: line.split() for line in out[1:]}
    assert rows["pods"] == ["pods", "po", "v1", "true", "Pod"]
    assert rows["deployments"] == ["deployments", "deploy", "apps/v1", "true", "Deployment"]
    assert rows["namespaces"] == ["namespaces", "ns", "v1", "false", "Namespace"]
    assert rows["services"] == ["services", "svc", "v1", "true", "Service"]
    assert rows["configmaps"] == ["configmaps", "cm", "v1", "true", "ConfigMap"]
    assert rows["nodes"] == ["nodes", "no", "v1", "false", "Node"]
    assert rows["bindings"] == ["bindings", "v1", "true", "Binding"]
    assert rows["leases"] == ["leases", "coordination.k8s.io/v1", "true", "Lease"]
    wide = {line.split()[0]: line.split()[-2:] for line in kubectl.run("api-resources", "-o", "wide").stdout
            .splitlines()[1:]}
    every = "create,delete,deletecollection,get,list,patch,update,watch"
    assert wide["pods"] == [every, "all"] and wide["deployments"] == [every, "all"]
    assert wide["namespaces"][-1] == "create,delete,get,list,patch,update,watch"
    assert wide["configmaps"][-1] == every and wide["bindings"][-1] == "create"
    namespaced = kubectl.run("api-resources", "--namespaced=false", "-o", "name").stdout.split()
    assert "namespaces" in namespaced and "nodes" in namespaced and "pods" not in namespaced
    apps = kubectl.run("api-resources", "--api-group=apps", "-o", "name").stdout.split()
    assert set(apps) == {"controllerrevisions.apps", "daemonsets.apps", "deployments.apps",
                         "replicasets.apps", "statefulsets.apps"}


def test_get_namespaces_lists_the_system_ones(kubectl: Kubectl) -> None:
    out = kubectl.run("get", "ns").stdout.splitlines()
    assert out[0].split() == ["NAME", "STATUS", "AGE"]
    rows = {line.split()[0]: line.split()[1] for line in out[1:]}
    for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
        assert rows[ns] == "Active"


# Create and read


def test_create_multi_document_yaml(kubectl: Kubectl, unique_ns: str) -> None:
    out = kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=STACK)
    assert out.stdout.splitlines() == ["deployment.apps/web created", "service/web created",
                                       "configmap/web-config created"]
    assert sorted(names(kubectl, "-n", unique_ns, "deploy,svc,cm")) == [
        "configmap/web-config", "deployment.apps/web", "service/web"]
    dep = kubectl.json("get", "-n", unique_ns, "deployment", "web")
    assert dep["spec"]["strategy"]["type"] == "RollingUpdate"
    assert dep["spec"]["revisionHistoryLimit"] == 10
    again = kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=STACK, check=False)
    assert again.returncode != 0
    assert ('Error from server (AlreadyExists): error when creating "STDIN": '
            'deployments.apps "web" already exists') in again.stderr


def test_get_output_formats(kubectl: Kubectl, unique_ns: str) -> None:
    kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=STACK)
    as_yaml = kubectl.run("get", "-n", unique_ns, "cm", "web-config", "-o", "yaml").stdout
    assert "kind: ConfigMap" in as_yaml and "mode: production" in as_yaml
    assert re.search(r"^  resourceVersion: \"\d+\"$", as_yaml, re.M)
    assert re.search(r"^  uid: [0-9a-f-]{36}$", as_yaml, re.M)
    as_json = kubectl.json("get", "-n", unique_ns, "cm", "web-config")
    assert as_json["metadata"]["namespace"] == unique_ns and as_json["data"] == {"mode": "production"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", as_json["metadata"]["creationTimestamp"])
    listing = kubectl.json("get", "-n", unique_ns, "cm")
    assert listing["kind"] == "List" and [i["kind"] for i in listing["items"]] == ["ConfigMap"]
    path = kubectl.run("get", "-n", unique_ns, "svc", "web", "-o",
                       "jsonpath={.spec.ports[0].port}/{.spec.ports[0].targetPort}/{.spec.type}").stdout
    assert path == "80/8080/ClusterIP"
    items = kubectl.run("get", "-n", unique_ns, "deploy,cm", "-o", "jsonpath={.items[*].metadata.name}").stdout
    assert items.split() == ["web", "web-config"]
    assert names(kubectl, "-n", unique_ns, "svc") == ["service/web"]
    table = kubectl.run("get", "-n", unique_ns, "deploy").stdout.splitlines()
    assert table[0].split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert table[1].split()[:2] == ["web", "0/2"]
    wide = kubectl.run("get", "-n", unique_ns, "deploy", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[5:] == ["CONTAINERS", "IMAGES", "SELECTOR"]
    assert wide[1].split()[5:] == ["web", "nginx:1.27", "app=web"]
    custom = kubectl.run("get", "-n", unique_ns, "cm", "-o", "custom-columns=N:.metadata.name,M:.data.mode")
    assert custom.stdout.splitlines() == ["N            M", "web-config   production"]


def test_label_selectors(kubectl: Kubectl, unique_ns: str) -> None:
    docs = [configmap("a", {"env": "prod", "tier": "web"}), configmap("b", {"env": "dev", "tier": "db"}),
            configmap("c", {"env": "test"}), configmap("d")]
    kubectl.run("create", "-n", unique_ns, "-f", "-", stdin="\n---\n".join(docs))
    ns = ("-n", unique_ns, "cm")
    assert names(kubectl, *ns, "-l", "env=prod") == ["configmap/a"]
    assert names(kubectl, *ns, "-l", "env!=prod") == ["configmap/b", "configmap/c", "configmap/d"]
    assert names(kubectl, *ns, "-l", "env==dev,tier=db") == ["configmap/b"]
    assert names(kubectl, *ns, "-l", "env in (prod,test)") == ["configmap/a", "configmap/c"]
    assert names(kubectl, *ns, "-l", "env notin (prod,test)") == ["configmap/b", "configmap/d"]
    assert names(kubectl, *ns, "-l", "tier") == ["configmap/a", "configmap/b"]
    assert names(kubectl, *ns, "-l", "!tier") == ["configmap/c", "configmap/d"]
    empty = kubectl.run("get", *ns, "-l", "env=nope")
    assert empty.stdout == "" and f"No resources found in {unique_ns} namespace." in empty.stderr
    bad = kubectl.run("get", *ns, "-l", "env in prod", check=False)
    assert bad.returncode != 0


def test_field_selectors(kubectl: Kubectl, unique_ns: str) -> None:
    docs = [pod("p-scheduled", node="node-a"), pod("p-other", node="node-b"), pod("p-pending")]
    kubectl.run("create", "-n", unique_ns, "-f", "-", stdin="\n---\n".join(docs))
    ns = ("-n", unique_ns, "pods")
    assert names(kubectl, *ns, "--field-selector", "metadata.name=p-other") == ["pod/p-other"]
    assert names(kubectl, *ns, "--field-selector", "metadata.name!=p-other") == [
        "pod/p-pending", "pod/p-scheduled"]
    assert names(kubectl, *ns, "--field-selector", "spec.nodeName=node-a") == ["pod/p-scheduled"]
    assert names(kubectl, *ns, "--field-selector", "spec.nodeName=") == ["pod/p-pending"]
    assert len(names(kubectl, *ns, "--field-selector", "status.phase=Pending")) == 3
    running = kubectl.run("get", *ns, "--field-selector", "status.phase=Running,spec.nodeName=node-a")
    assert running.stdout == "" and "No resources found" in running.stderr
    assert names(kubectl, "-n", unique_ns, "cm", "--field-selector", "metadata.namespace=" + unique_ns) == []
    unsupported = kubectl.run("get", *ns, "--field-selector", "spec.bogus=x", check=False)
    assert unsupported.returncode != 0
    assert ('Error from server (BadRequest): Unable to find "/v1, Resource=pods" that match label selector "", '
            'field selector "spec.bogus=x": field label not supported: spec.bogus') in unsupported.stderr


def test_all_namespaces(kubectl: Kubectl, unique_ns: str) -> None:
    create_cm(kubectl, unique_ns, "everywhere", k="v")
    out = kubectl.run("get", "cm", "-A").stdout.splitlines()
    assert out[0].split() == ["NAMESPACE", "NAME", "DATA", "AGE"]
    assert [unique_ns, "everywhere", "1"] in [line.split()[:3] for line in out[1:]]
    listing = kubectl.json("get", "namespaces", "--all-namespaces")
    assert {"default", "kube-system", unique_ns} <= {i["metadata"]["name"] for i in listing["items"]}
    pods = kubectl.run("get", "pods", "-A", "--field-selector", "metadata.namespace=" + unique_ns)
    assert "No resources found" in pods.stderr


def _reader(proc: subprocess.Popen[str], lines: queue.Queue[str], stream: str = "stdout") -> None:
    pipe = getattr(proc, stream)
    assert pipe is not None
    for line in pipe:
        lines.put(line.rstrip("\n"))


def _wait_line(lines: queue.Queue[str], pattern: str, timeout: float = 15) -> str:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.05, deadline - time.monotonic()))
        except queue.Empty:
            break
        seen.append(line)
        if re.search(pattern, line):
            return line
    raise AssertionError(f"no line matching {pattern!r} in {seen!r}")


def test_get_watch_streams_later_changes(kubectl: Kubectl, unique_ns: str) -> None:
    create_cm(kubectl, unique_ns, "first", a="1")
    proc = subprocess.Popen([KUBECTL, "--kubeconfig", str(kubectl.kubeconfig), "get", "cm", "-n", unique_ns, "-w",
                             "--request-timeout=30s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_reader, args=(proc, lines), daemon=True).start()
    try:
        assert _wait_line(lines, r"^NAME\s+DATA\s+AGE$").split() == ["NAME", "DATA", "AGE"]
        assert _wait_line(lines, r"^first\s").split()[:2] == ["first", "1"]
        create_cm(kubectl, unique_ns, "second", a="1", b="2")
        assert _wait_line(lines, r"^second\s").split()[:2] == ["second", "2"]
        kubectl.run("patch", "cm", "first", "-n", unique_ns, "--type", "merge", "-p", '{"data":{"c":"3"}}')
        assert _wait_line(lines, r"^first\s").split()[:2] == ["first", "2"]
    finally:
        proc.kill()
        proc.wait(10)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stderr.close()


def test_get_watch_output_watch_events(kubectl: Kubectl, unique_ns: str) -> None:
    proc = subprocess.Popen([KUBECTL, "--kubeconfig", str(kubectl.kubeconfig), "get", "cm", "-n", unique_ns,
                             "--watch-only", "--output-watch-events", "-v=6"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    log: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_reader, args=(proc, lines), daemon=True).start()
    threading.Thread(target=_reader, args=(proc, log, "stderr"), daemon=True).start()
    try:
        _wait_line(log, r"GET \S+/configmaps\?\S*watch=true\S* 200 OK")
        create_cm(kubectl, unique_ns, "gone-soon")
        assert _wait_line(lines, "gone-soon").split()[:3] == ["ADDED", "gone-soon", "0"]
        kubectl.run("delete", "configmap", "gone-soon", "-n", unique_ns)
        assert _wait_line(lines, "gone-soon").split()[:3] == ["DELETED", "gone-soon", "0"]
    finally:
        proc.kill()
        proc.wait(10)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stderr.close()


# Modify


def test_label(kubectl: Kubectl, unique_ns: str) -> None:
    kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=pod("lab"))
    assert kubectl.run("label", "-n", unique_ns, "pod", "lab", "app=one").stdout.strip() == "pod/lab labeled"
    refused = kubectl.run("label", "-n", unique_ns, "pod", "lab", "app=two", check=False)
    assert refused.returncode != 0
    assert "'app' already has a value (one), and --overwrite is false" in refused.stderr
    assert kubectl.json("get", "-n", unique_ns, "pod", "lab")["metadata"]["labels"] == {"app": "one"}
    assert kubectl.run("label", "-n", unique_ns, "pod", "lab", "app=two", "--overwrite").stdout.strip() == (
        "pod/lab labeled")
    assert names(kubectl, "-n", unique_ns, "pods", "-l", "app=two") == ["pod/lab"]
    assert kubectl.run("label", "-n", unique_ns, "pod", "lab", "app-").stdout.strip() == "pod/lab unlabeled"
    assert kubectl.json("get", "-n", unique_ns, "pod", "lab")["metadata"].get("labels", {}) == {}
    invalid = kubectl.run("label", "-n", unique_ns, "pod", "lab", "bad key=x", check=False)
    assert invalid.returncode != 0


def test_annotate(kubectl: Kubectl, unique_ns: str) -> None:
    create_cm(kubectl, unique_ns, "note")
    ns = ("-n", unique_ns, "configmap", "note")
    assert kubectl.run("annotate", *ns, "owner=alice").stdout.strip() == "configmap/note annotated"
    refused = kubectl.run("annotate", *ns, "owner=bob", check=False)
    assert refused.returncode != 0
    assert "--overwrite is false but found the following declared annotation(s): 'owner' already has a value " \
           "(alice)" in refused.stderr
    assert kubectl.run("annotate", *ns, "owner=bob", "--overwrite").stdout.strip() == "configmap/note annotated"
    assert kubectl.json("get", *ns)["metadata"]["annotations"] == {"owner": "bob"}
    assert kubectl.run("annotate", *ns, "owner-").stdout.strip() == "configmap/note annotated"
    assert kubectl.json("get", *ns)["metadata"].get("annotations", {}) == {}


def test_patch_merge_and_json(kubectl: Kubectl, unique_ns: str) -> None:
    create_cm(kubectl, unique_ns, "pt", a="1", b="2")
    ns = ("-n", unique_ns, "configmap", "pt")
    before = kubectl.json("get", *ns)["metadata"]["resourceVersion"]
    out = kubectl.run("patch", *ns, "--type", "merge", "-p", '{"data":{"a":"10","b":null,"c":"3"}}')
    assert out.stdout.strip() == "configmap/pt patched"
    after = kubectl.json("get", *ns)
    assert after["data"] == {"a": "10", "c": "3"}
    assert int(after["metadata"]["resourceVersion"]) > int(before)
    same = kubectl.run("patch", *ns, "--type", "merge", "-p", '{"data":{"a":"10"}}')
    assert same.stdout.strip() == "configmap/pt patched (no change)"
    assert kubectl.json("get", *ns)["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]
    ops = '[{"op":"replace","path":"/data/a","value":"11"},{"op":"add","path":"/data/d","value":"4"},' \
          '{"op":"remove","path":"/data/c"}]'
    assert kubectl.run("patch", *ns, "--type", "json", "-p", ops).stdout.strip() == "configmap/pt patched"
    assert kubectl.json("get", *ns)["data"] == {"a": "11", "d": "4"}
    failed = kubectl.run("patch", *ns, "--type", "json", "-p",
                         '[{"op":"test","path":"/data/a","value":"nope"}]', check=False)
    assert failed.returncode != 0 and "testing value /data/a failed" in failed.stderr


def test_patch_strategic_merges_lists_by_key(kubectl: Kubectl, unique_ns: str) -> None:
    kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=STACK)
    strategic = kubectl.run("patch", "-n", unique_ns, "deployment", "web", "-p",
                            '{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.28"}]}}}}')
    assert strategic.stdout.strip() == "deployment.apps/web patched"
    container = kubectl.json("get", "-n", unique_ns, "deployment", "web")["spec"]["template"]["spec"]["containers"]
    assert [(c["name"], c["image"], c["ports"][0]["containerPort"]) for c in container] == [
        ("web", "nginx:1.28", 8080)]


def test_replace_and_stale_resource_version(kubectl: Kubectl, unique_ns: str) -> None:
    create_cm(kubectl, unique_ns, "rep", a="1")
    current = kubectl.json("get", "-n", unique_ns, "configmap", "rep")
    current["data"] = {"a": "2"}
    out = kubectl.run("replace", "-n", unique_ns, "-f", "-", stdin=json.dumps(current))
    assert out.stdout.strip() == "configmap/rep replaced"
    fresh = kubectl.json("get", "-n", unique_ns, "configmap", "rep")
    assert fresh["data"] == {"a": "2"}
    assert int(fresh["metadata"]["resourceVersion"]) > int(current["metadata"]["resourceVersion"])
    current["data"] = {"a": "3"}
    stale = kubectl.run("replace", "-n", unique_ns, "-f", "-", stdin=json.dumps(current), check=False)
    assert stale.returncode != 0
    assert ('Error from server (Conflict): error when replacing "STDIN": Operation cannot be fulfilled on '
            'configmaps "rep": the object has been modified; please apply your changes to the latest version '
            'and try again') in stale.stderr
    assert kubectl.json("get", "-n", unique_ns, "configmap", "rep")["data"] == {"a": "2"}
    missing = kubectl.run("replace", "-n", unique_ns, "-f", "-", stdin=configmap("nope"), check=False)
    assert 'Error from server (NotFound): error when replacing "STDIN": configmaps "nope" not found' in (
        missing.stderr)
    forced = kubectl.run("replace", "--force", "-n", unique_ns, "-f", "-", stdin=configmap("rep", a="9"))
    assert forced.stdout.splitlines() == ['configmap "rep" deleted', "configmap/rep replaced"]
    assert kubectl.json("get", "-n", unique_ns, "configmap", "rep")["data"] == {"a": "9"}


def test_scale_deployment(kubectl: Kubectl, unique_ns: str) -> None:
    kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=STACK)
    out = kubectl.run("scale", "-n", unique_ns, "deployment", "web", "--replicas", "5")
    assert out.stdout.strip() == "deployment.apps/web scaled"
    assert kubectl.json("get", "-n", unique_ns, "deployment", "web")["spec"]["replicas"] == 5
    guarded = kubectl.run("scale", "-n", unique_ns, "deployment", "web", "--current-replicas=2", "--replicas=1",
                          check=False)
    assert guarded.returncode != 0 and "Expected replicas to be 2, was 5" in guarded.stderr
    kubectl.run("scale", "-n", unique_ns, "deployment/web", "--replicas=0")
    scale = json.loads(kubectl.run("get", "--raw",
                                   f"/apis/apps/v1/namespaces/{unique_ns}/deployments/web/scale").stdout)
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 0} and scale["status"]["selector"] == "app=web"
    malformed = kubectl.run("replace", "--raw", f"/apis/apps/v1/namespaces/{unique_ns}/deployments/web/scale",
                            "-f", "-", stdin='{"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": [{}]}',
                            check=False)
    assert malformed.returncode != 0
    assert "cannot unmarshal array into Go struct field Scale.spec of type v1.ScaleSpec" in malformed.stderr


# Delete


def test_delete_by_name_file_label_and_all(kubectl: Kubectl, unique_ns: str) -> None:
    ns = ("-n", unique_ns)
    kubectl.run("create", *ns, "-f", "-", stdin=STACK)
    kubectl.run("create", *ns, "-f", "-",
                stdin="\n---\n".join([configmap("x1", {"grp": "x"}), configmap("x2", {"grp": "x"}),
                                      configmap("y1", {"grp": "other"}), configmap("z1")]))
    assert kubectl.run("delete", *ns, "configmap", "z1").stdout.strip() == 'configmap "z1" deleted'
    missing = kubectl.run("delete", *ns, "configmap", "z1", check=False)
    assert missing.returncode != 0
    assert 'Error from server (NotFound): configmaps "z1" not found' in missing.stderr
    assert kubectl.run("delete", *ns, "configmap", "z1", "--ignore-not-found").returncode == 0
    by_file = kubectl.run("delete", *ns, "-f", "-", stdin=STACK).stdout.splitlines()
    assert by_file == ['deployment.apps "web" deleted', 'service "web" deleted', 'configmap "web-config" deleted']
    by_label = kubectl.run("delete", *ns, "configmap", "-l", "grp=x").stdout.splitlines()
    assert by_label == ['configmap "x1" deleted', 'configmap "x2" deleted']
    assert names(kubectl, *ns, "configmap") == ["configmap/y1"]
    create_cm(kubectl, unique_ns, "y2")
    assert kubectl.run("delete", *ns, "configmap", "--all").stdout.splitlines() == [
        'configmap "y1" deleted', 'configmap "y2" deleted']
    assert names(kubectl, *ns, "configmap,deploy,svc") == []


def test_delete_pod_is_graceful_for_unscheduled_pods(kubectl: Kubectl, unique_ns: str) -> None:
    """A pod never bound to a node has no kubelet to wait for: upstream removes it at once."""
    kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=pod("short"))
    out = kubectl.run("delete", "-n", unique_ns, "pod", "short", timeout=30)
    assert out.stdout.strip() == 'pod "short" deleted'
    assert names(kubectl, "-n", unique_ns, "pods") == []


# Generators


def test_create_namespace(kubectl: Kubectl, unique_ns: str) -> None:
    name = unique_ns + "-extra"
    assert kubectl.run("create", "namespace", name).stdout.strip() == f"namespace/{name} created"
    ns = kubectl.json("get", "namespace", name)
    assert ns["status"]["phase"] == "Active" and ns["spec"]["finalizers"] == ["kubernetes"]
    assert ns["metadata"]["labels"] == {"kubernetes.io/metadata.name": name}
    dup = kubectl.run("create", "namespace", name, check=False)
    assert f'Error from server (AlreadyExists): namespaces "{name}" already exists' in dup.stderr


def test_create_configmap_from_literal(kubectl: Kubectl, unique_ns: str) -> None:
    out = kubectl.run("create", "configmap", "lit", "-n", unique_ns, "--from-literal=user=alice",
                      "--from-literal=level=3")
    assert out.stdout.strip() == "configmap/lit created"
    cm = kubectl.json("get", "configmap", "lit", "-n", unique_ns)
    assert cm["data"] == {"user": "alice", "level": "3"}
    assert kubectl.run("get", "cm", "lit", "-n", unique_ns).stdout.splitlines()[1].split()[:2] == ["lit", "2"]


def test_create_secret_generic(kubectl: Kubectl, unique_ns: str) -> None:
    out = kubectl.run("create", "secret", "generic", "creds", "-n", unique_ns, "--from-literal=password=s3cr3t",
                      "--from-literal=user=admin")
    assert out.stdout.strip() == "secret/creds created"
    secret = kubectl.json("get", "secret", "creds", "-n", unique_ns)
    assert secret["type"] == "Opaque"
    assert secret["data"] == {"password": base64.b64encode(b"s3cr3t").decode(),
                              "user": base64.b64encode(b"admin").decode()}
    table = kubectl.run("get", "secret", "creds", "-n", unique_ns).stdout.splitlines()
    assert table[0].split() == ["NAME", "TYPE", "DATA", "AGE"] and table[1].split()[:3] == ["creds", "Opaque", "2"]
    decoded = kubectl.run("get", "secret", "creds", "-n", unique_ns, "-o",
                          "go-template={{.data.password | base64decode}}").stdout
    assert decoded == "s3cr3t"
    string_data = json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sd"},
                              "stringData": {"token": "abc"}})
    kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=string_data)
    stored = kubectl.json("get", "secret", "sd", "-n", unique_ns)
    assert stored["data"] == {"token": "YWJj"} and "stringData" not in stored


def test_run_creates_a_defaulted_pod(kubectl: Kubectl, unique_ns: str) -> None:
    out = kubectl.run("run", "web", "-n", unique_ns, "--image=nginx")
    assert out.stdout.strip() == "pod/web created"
    p = kubectl.json("get", "pod", "web", "-n", unique_ns)
    spec = p["spec"]
    assert p["metadata"]["labels"] == {"run": "web"}
    assert spec["restartPolicy"] == "Always"
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["securityContext"] == {}
    assert spec["enableServiceLinks"] is True
    container = spec["containers"][0]
    assert container["name"] == "web" and container["image"] == "nginx"
    assert container["imagePullPolicy"] == "Always"
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "File"
    assert container["resources"] == {}
    assert p["status"]["phase"] == "Pending" and p["status"]["qosClass"] == "BestEffort"
    kubectl.run("run", "pinned", "-n", unique_ns, "--image=nginx:1.27", "--restart=Never", "--port=8080")
    pinned = kubectl.json("get", "pod", "pinned", "-n", unique_ns)["spec"]
    assert pinned["restartPolicy"] == "Never"
    assert pinned["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert pinned["containers"][0]["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    table = kubectl.run("get", "pods", "-n", unique_ns).stdout.splitlines()
    assert table[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert table[1].split()[:4] == ["pinned", "0/1", "Pending", "0"]


def test_expose_deployment(kubectl: Kubectl, unique_ns: str) -> None:
    kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=STACK.split("---")[0].replace("web", "api"))
    out = kubectl.run("expose", "deployment", "api", "-n", unique_ns, "--port", "80", "--target-port", "8080")
    assert out.stdout.strip() == "service/api exposed"
    svc = kubectl.json("get", "service", "api", "-n", unique_ns)
    spec = svc["spec"]
    assert spec["type"] == "ClusterIP" and spec["selector"] == {"app": "api"}
    assert spec["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 8080}]
    assert spec["sessionAffinity"] == "None"
    assert ipaddress.ip_address(spec["clusterIP"]) in ipaddress.ip_network("10.96.0.0/12")
    assert spec["clusterIPs"] == [spec["clusterIP"]]
    assert spec["ipFamilies"] == ["IPv4"] and spec["ipFamilyPolicy"] == "SingleStack"
    assert spec["internalTrafficPolicy"] == "Cluster"
    row = kubectl.run("get", "svc", "api", "-n", unique_ns).stdout.splitlines()[1].split()
    assert row[:5] == ["api", "ClusterIP", spec["clusterIP"], "<none>", "80/TCP"]
    kubectl.run("expose", "deployment", "api", "-n", unique_ns, "--name=api2", "--port=81")
    other = kubectl.json("get", "service", "api2", "-n", unique_ns)["spec"]["clusterIP"]
    assert other != spec["clusterIP"]


# Describe


def test_describe_pod(kubectl: Kubectl, unique_ns: str) -> None:
    kubectl.run("run", "desc", "-n", unique_ns, "--image=nginx:1.27", "--labels=app=desc")
    out = kubectl.run("describe", "pod", "desc", "-n", unique_ns).stdout
    for pattern in (r"^Name:\s+desc$", rf"^Namespace:\s+{unique_ns}$", r"^Labels:\s+app=desc$",
                    r"^Status:\s+Pending$", r"^Containers:$", r"^  desc:$", r"^    Image:\s+nginx:1\.27$",
                    r"^QoS Class:\s+BestEffort$", r"^Events:\s+<none>$"):
        assert re.search(pattern, out, re.M), f"{pattern!r} not in:\n{out}"


def test_describe_service(kubectl: Kubectl, unique_ns: str) -> None:
    kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=STACK)
    out = kubectl.run("describe", "service", "web", "-n", unique_ns).stdout
    ip = kubectl.json("get", "svc", "web", "-n", unique_ns)["spec"]["clusterIP"]
    for pattern in (r"^Name:\s+web$", rf"^Namespace:\s+{unique_ns}$", r"^Selector:\s+app=web$",
                    r"^Type:\s+ClusterIP$", rf"^IP:\s+{re.escape(ip)}$", r"^Port:\s+<unset>\s+80/TCP$",
                    r"^TargetPort:\s+8080/TCP$", r"^Session Affinity:\s+None$", r"^Events:\s+<none>$"):
        assert re.search(pattern, out, re.M), f"{pattern!r} not in:\n{out}"


NODE = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "", "labels": {"kubernetes.io/hostname": "", "kubernetes.io/os": "linux"}},
    "spec": {"podCIDR": "10.244.1.0/24"},
    "status": {"capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
               "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
               "addresses": [{"type": "InternalIP", "address": "192.0.2.10"}],
               "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "containerd://1.7",
                            "kernelVersion": "6.1", "kubeProxyVersion": "", "kubeletVersion": "v1.32.0",
                            "machineID": "", "operatingSystem": "linux", "osImage": "Debian", "systemUUID": ""}},
}


def test_describe_node(kubectl: Kubectl, unique_ns: str) -> None:
    name = unique_ns[-50:] + "-node"
    node = json.loads(json.dumps(NODE))
    node["metadata"]["name"] = name
    node["metadata"]["labels"]["kubernetes.io/hostname"] = name
    assert kubectl.run("create", "-f", "-", stdin=json.dumps(node)).stdout.strip() == f"node/{name} created"
    kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=pod("on-node", node=name))
    try:
        out = kubectl.run("describe", "node", name).stdout
        for pattern in (rf"^Name:\s+{name}$", r"^Roles:\s+<none>$", r"kubernetes\.io/os=linux",
                        r"^Addresses:$", r"^  InternalIP:\s+192\.0\.2\.10$", r"^Capacity:$", r"^  pods:\s+110$",
                        r"^PodCIDR:\s+10\.244\.1\.0/24$", r"^Non-terminated Pods:\s+\(1 in total\)$",
                        rf"^  {unique_ns}\s+on-node\s", r"^Events:\s+<none>$"):
            assert re.search(pattern, out, re.M), f"{pattern!r} not in:\n{out}"
        row = kubectl.run("get", "node", name).stdout.splitlines()
        assert row[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
        assert row[1].split()[:3] == [name, "Unknown", "<none>"] and row[1].split()[-1] == "v1.32.0"
    finally:
        kubectl.run("delete", "node", name, "--wait=false")


def test_describe_deployment(kubectl: Kubectl, unique_ns: str) -> None:
    kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=STACK)
    out = kubectl.run("describe", "deployment", "web", "-n", unique_ns).stdout
    for pattern in (r"^Name:\s+web$", rf"^Namespace:\s+{unique_ns}$", r"^Selector:\s+app=web$",
                    r"^Replicas:\s+2 desired \| 0 updated \| 0 total \| 0 available \| 0 unavailable$",
                    r"^StrategyType:\s+RollingUpdate$", r"^MinReadySeconds:\s+0$",
                    r"^RollingUpdateStrategy:\s+25% max unavailable, 25% max surge$", r"^Pod Template:$",
                    r"^    Image:\s+nginx:1\.27$", r"^Events:\s+<none>$"):
        assert re.search(pattern, out, re.M), f"{pattern!r} not in:\n{out}"


# Namespace lifecycle and errors


def test_namespace_deletion_is_finalized(kubectl: Kubectl, unique_ns: str) -> None:
    create_cm(kubectl, unique_ns, "keep")
    out = kubectl.run("delete", "namespace", unique_ns, "--wait=false")
    assert out.stdout.strip() == f'namespace "{unique_ns}" deleted'
    ns = kubectl.json("get", "namespace", unique_ns)
    assert ns["status"]["phase"] == "Terminating"
    assert ns["spec"]["finalizers"] == ["kubernetes"]
    assert ns["metadata"]["deletionTimestamp"]
    assert kubectl.run("get", "ns", unique_ns).stdout.splitlines()[1].split()[:2] == [unique_ns, "Terminating"]
    refused = kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=configmap("late"), check=False)
    assert refused.returncode != 0
    assert (f'Error from server (Forbidden): error when creating "STDIN": configmaps "late" is forbidden: '
            f"unable to create new content in namespace {unique_ns} because it is being terminated") in (
        refused.stderr)
    assert names(kubectl, "-n", unique_ns, "configmap") == ["configmap/keep"]
    kubectl.run("patch", "configmap", "keep", "-n", unique_ns, "-p", '{"data":{"still":"writable"}}')
    again = kubectl.run("delete", "namespace", unique_ns, "--wait=false")
    assert again.returncode == 0


def test_create_in_missing_namespace(kubectl: Kubectl) -> None:
    out = kubectl.run("create", "-n", "no-such-ns-h8", "-f", "-", stdin=configmap("x"), check=False)
    assert out.returncode != 0
    assert ('Error from server (NotFound): error when creating "STDIN": namespaces "no-such-ns-h8" not found'
            in out.stderr)
    gen = kubectl.run("create", "configmap", "x", "-n", "no-such-ns-h8", check=False)
    assert gen.returncode != 0
    assert 'error: failed to create configmap: namespaces "no-such-ns-h8" not found' in gen.stderr


def test_invalid_name_is_rejected(kubectl: Kubectl, unique_ns: str) -> None:
    out = kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=configmap("Bad_Name"), check=False)
    assert out.returncode != 0
    assert ('The ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 '
            "subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with "
            "an alphanumeric character (e.g. 'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')") in out.stderr
    p = kubectl.run("run", "Bad.Pod", "-n", unique_ns, "--image=nginx", check=False)
    assert p.returncode != 0
    assert p.stderr.startswith('The Pod "Bad.Pod" is invalid: \n* metadata.name: Invalid value: "Bad.Pod": a '
                               "lowercase RFC 1123 subdomain must consist of"), p.stderr
    assert '\n* spec.containers[0].name: Invalid value: "Bad.Pod": a lowercase RFC 1123 label must' in p.stderr
    dots = kubectl.run("create", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dots.not.allowed"}}), check=False)
    assert ('The Namespace "dots.not.allowed" is invalid: metadata.name: Invalid value: "dots.not.allowed": '
            "must not contain dots") in dots.stderr
    ns = kubectl.run("create", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "Upper-NS"}}), check=False)
    assert ('The Namespace "Upper-NS" is invalid: metadata.name: Invalid value: "Upper-NS": '
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
            "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')") in ns.stderr
    empty = kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nocontainers"}, "spec": {"containers": []}}),
        check=False)
    assert 'The Pod "nocontainers" is invalid: spec.containers: Required value' in empty.stderr


def test_server_dry_run_stores_nothing(kubectl: Kubectl, unique_ns: str) -> None:
    out = kubectl.run("create", "-n", unique_ns, "-f", "-", "--dry-run=server", stdin=STACK)
    assert out.stdout.splitlines() == ["deployment.apps/web created (server dry run)",
                                       "service/web created (server dry run)",
                                       "configmap/web-config created (server dry run)"]
    assert names(kubectl, "-n", unique_ns, "deploy,svc,cm") == []
    shown = json.loads(kubectl.run("create", "-n", unique_ns, "-f", "-", "--dry-run=server", "-o", "json",
                                   stdin=configmap("dry", a="b")).stdout)
    assert shown["metadata"]["uid"] and shown["metadata"]["creationTimestamp"]
    assert names(kubectl, "-n", unique_ns, "cm") == []
    create_cm(kubectl, unique_ns, "real", a="b")
    rv = kubectl.json("get", "cm", "real", "-n", unique_ns)["metadata"]["resourceVersion"]
    kubectl.run("label", "cm", "real", "-n", unique_ns, "x=y", "--dry-run=server")
    kubectl.run("delete", "cm", "real", "-n", unique_ns, "--dry-run=server")
    stored = kubectl.json("get", "cm", "real", "-n", unique_ns)
    assert stored["metadata"]["resourceVersion"] == rv and "labels" not in stored["metadata"]


def test_generate_name(kubectl: Kubectl, unique_ns: str) -> None:
    doc = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"},
                      "data": {"k": "v"}})
    first = kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=doc).stdout.strip()
    second = kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=doc).stdout.strip()
    pattern = r"configmap/gen-[bcdfghjklmnpqrstvwxz2456789]{5} created"
    assert re.fullmatch(pattern, first) and re.fullmatch(pattern, second)
    assert first != second
    name = first.split()[0].split("/")[1]
    stored = kubectl.json("get", "cm", name, "-n", unique_ns)
    assert stored["metadata"]["generateName"] == "gen-" and stored["data"] == {"k": "v"}
    bad = kubectl.run("create", "-n", unique_ns, "-f", "-", stdin=doc.replace("gen-", "Gen_"), check=False)
    assert bad.returncode != 0 and "metadata.generateName: Invalid value" in bad.stderr


@pytest.mark.parametrize("chunk", ["2", "0"])
def test_chunked_list(kubectl: Kubectl, unique_ns: str, chunk: str) -> None:
    kubectl.run("create", "-n", unique_ns, "-f", "-", stdin="\n---\n".join(pod(f"p{i}") for i in range(5)))
    listed = kubectl.run("get", "pods", "-n", unique_ns, f"--chunk-size={chunk}", "-o", "name", "-v=6")
    assert listed.stdout.split() == [f"pod/p{i}" for i in range(5)]
    pages = re.findall(r"GET \S+/pods(?:\?\S*)? ", listed.stderr)
    assert len(pages) == (3 if chunk == "2" else 1), pages
    table = kubectl.run("get", "pods", "-n", unique_ns, f"--chunk-size={chunk}").stdout.splitlines()
    assert table[0].split()[0] == "NAME" and [row.split()[0] for row in table[1:]] == [f"p{i}" for i in range(5)]
