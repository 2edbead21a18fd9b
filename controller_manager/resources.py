"""The resources the core controllers read and write, as client path descriptors."""

from __future__ import annotations

from services.client import gvr

PODS = gvr("v1", "pods")
NODES = gvr("v1", "nodes", namespaced=False)
NAMESPACES = gvr("v1", "namespaces", namespaced=False)
SERVICE_ACCOUNTS = gvr("v1", "serviceaccounts")
EVENTS = gvr("v1", "events")
REPLICATION_CONTROLLERS = gvr("v1", "replicationcontrollers")
REPLICA_SETS = gvr("apps/v1", "replicasets")
DEPLOYMENTS = gvr("apps/v1", "deployments")
STATEFUL_SETS = gvr("apps/v1", "statefulsets")
DAEMON_SETS = gvr("apps/v1", "daemonsets")
CONTROLLER_REVISIONS = gvr("apps/v1", "controllerrevisions")
JOBS = gvr("batch/v1", "jobs")
CRON_JOBS = gvr("batch/v1", "cronjobs")
PVCS = gvr("v1", "persistentvolumeclaims")
PVS = gvr("v1", "persistentvolumes", namespaced=False)
STORAGE_CLASSES = gvr("storage.k8s.io/v1", "storageclasses", namespaced=False)
