"""The audit policy's rule matching and validation, and the log backend's rotation."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from apiserver.audit.backend import LogBackend, LogOptions
from apiserver.audit.policy import PolicyError, parse_policy
from apiserver.auth.authz import request_attributes
from services.auth.identity import UserInfo

JANE = UserInfo("jane", groups=("devs", "system:authenticated"))


def _policy(*rules: dict[str, object], **extra: object) -> dict[str, object]:
    return {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": list(rules), **extra}


def _level(policy: dict[str, object], method: str, path: str, user: UserInfo = JANE, query: str = "") -> str:
    attrs = request_attributes(user, method, path, query.encode())
    return parse_policy(policy).decide(attrs).level


def test_first_matching_rule_decides_and_no_match_is_not_audited() -> None:
    policy = _policy({"level": "None", "users": ["system:kube-proxy"], "verbs": ["watch"]},
                     {"level": "RequestResponse", "resources": [{"group": "", "resources": ["pods/log"]}]},
                     {"level": "Request", "resources": [{"group": "apps", "resources": ["deployments"],
                                                         "resourceNames": ["web"]}], "namespaces": ["prod"]},
                     {"level": "Metadata", "nonResourceURLs": ["/healthz*"]},
                     {"level": "Metadata", "userGroups": ["devs"], "resources": [{"group": ""}]})
    proxy = UserInfo("system:kube-proxy")
    assert _level(policy, "GET", "/api/v1/endpoints", proxy, "watch=1") == "None"
    assert _level(policy, "GET", "/api/v1/endpoints", proxy) == "None"  # no rule for a list by kube-proxy
    assert _level(policy, "GET", "/api/v1/namespaces/a/pods/p/log") == "RequestResponse"
    assert _level(policy, "PUT", "/apis/apps/v1/namespaces/prod/deployments/web") == "Request"
    assert _level(policy, "PUT", "/apis/apps/v1/namespaces/prod/deployments/api") == "None"
    assert _level(policy, "PUT", "/apis/apps/v1/namespaces/dev/deployments/web") == "None"
    assert _level(policy, "GET", "/healthz/etcd") == "Metadata"
    assert _level(policy, "GET", "/version") == "None"
    assert _level(policy, "POST", "/api/v1/namespaces/a/configmaps") == "Metadata"


def test_subresource_wildcards() -> None:
    policy = _policy({"level": "Request", "resources": [{"group": "", "resources": ["*/status"]}]},
                     {"level": "Metadata", "resources": [{"group": "", "resources": ["pods/*"]}]})
    assert _level(policy, "PUT", "/api/v1/nodes/n/status") == "Request"
    assert _level(policy, "POST", "/api/v1/namespaces/a/pods/p/eviction") == "Metadata"
    assert _level(policy, "GET", "/api/v1/namespaces/a/pods/p") == "Metadata"  # "pods/*" covers pods, as upstream's
    assert _level(policy, "GET", "/api/v1/namespaces/a/services/s") == "None"


def test_omit_stages_and_managed_fields_combine() -> None:
    policy = parse_policy(_policy({"level": "Metadata", "omitStages": ["ResponseStarted"],
                                   "omitManagedFields": False}, omitStages=["RequestReceived"],
                                  omitManagedFields=True))
    decision = policy.decide(request_attributes(JANE, "GET", "/api/v1/pods"))
    assert decision.omit_stages == {"RequestReceived", "ResponseStarted"}
    assert decision.omit_managed_fields is False


@pytest.mark.parametrize(("doc", "message"), [
    (_policy(), "0 rules"),
    (_policy({"verbs": ["get"]}), "rules[0].level: Required value"),
    (_policy({"level": "Metadata", "omitStages": ["Later"]}), 'rules[0].omitStages[0]: Unsupported value: "Later"'),
    (_policy({"level": "Metadata", "nonResourceURLs": ["/x"], "namespaces": ["a"]}), "both regular resources"),
    (_policy({"level": "Metadata", "nonResourceURLs": ["healthz"]}), 'must begin with a "/"'),
    ({"apiVersion": "audit.k8s.io/v1beta1", "kind": "Policy", "rules": [{"level": "None"}]}, "want audit.k8s.io/v1"),
])
def test_invalid_policies_name_the_field(doc: dict[str, object], message: str) -> None:
    with pytest.raises(PolicyError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_policy(doc)


def test_log_rotates_at_the_size_and_keeps_max_backups(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    backend = LogBackend(LogOptions(str(path), max_backups=2, max_size_mb=1))
    event = {"auditID": "x", "stage": "ResponseComplete", "pad": "a" * 100_000}
    for _ in range(40):
        backend.process(event)
    backend.close()
    backups = sorted(p for p in tmp_path.iterdir() if p.name != "audit.log")
    assert len(backups) == 2
    assert all(p.name.startswith("audit-") and p.suffix == ".log" for p in backups)
    for p in [path, *backups]:
        assert p.stat().st_size <= 1024 * 1024
        assert orjson.loads(p.read_bytes().splitlines()[0])["auditID"] == "x"
