"""A StatefulSet's template may mount its claim templates, which are volumes only once the controller
makes the pods; any other mount must still name a volume."""

from __future__ import annotations

import json

from tests.conftest import Kubectl

# The web/nginx StatefulSet of the kubernetes.io StatefulSet basics tutorial.
WEB = """
apiVersion: v1
kind: Service
metadata:
  name: nginx
  labels:
    app: nginx
spec:
  ports:
  - port: 80
    name: web
  clusterIP: None
  selector:
    app: nginx
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  serviceName: "nginx"
  replicas: 2
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: registry.k8s.io/nginx-slim:0.24
        ports:
        - containerPort: 80
          name: web
        volumeMounts:
        - name: www
          mountPath: /usr/share/nginx/html
  volumeClaimTemplates:
  - metadata:
      name: www
    spec:
      accessModes: [ "ReadWriteOnce" ]
      resources:
        requests:
          storage: 1Gi
"""


def test_tutorial_statefulset_with_claim_template_mount_applies(kubectl: Kubectl, unique_ns: str) -> None:
    out = kubectl.run("apply", "-n", unique_ns, "-f", "-", stdin=WEB)
    assert "statefulset.apps/web created" in out.stdout
    sts = kubectl.json("get", "-n", unique_ns, "statefulset", "web")
    assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "www"
    assert sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["name"] == "www"


def test_mount_of_neither_volume_nor_claim_template_is_refused(kubectl: Kubectl, unique_ns: str) -> None:
    bad = WEB.replace("- name: www\n          mountPath", "- name: data\n          mountPath")
    out = kubectl.run("apply", "-n", unique_ns, "-f", "-", stdin=bad, check=False)
    assert out.returncode != 0
    assert ('The StatefulSet "web" is invalid: spec.template.spec.containers[0].volumeMounts[0].name: '
            'Not found: "data"') in out.stderr
    assert json.loads(kubectl.run("get", "-n", unique_ns, "statefulsets", "-o", "json").stdout)["items"] == []
