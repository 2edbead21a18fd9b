"""Under --use-service-account-credentials every controller runs as an account that upstream's bootstrap
policy binds to a role of its own, so none is left with no rights (or borrows another's)."""

from __future__ import annotations

from apiserver.auth import bootstrap_policy
from controller_manager.registry import SERVICE_ACCOUNTS, discover, service_account
from deploy import addon_accounts

#: controllers of pyk8s's own, whose account `pyk8s up` binds (deploy/addon_accounts.py)
OWN = {addon_accounts.PROVISIONER_ACCOUNT, addon_accounts.SERVICE_LB_ACCOUNT}


def bound_accounts() -> set[str]:
    accounts = set()
    for binding in bootstrap_policy.cluster_role_bindings() + bootstrap_policy.namespace_role_bindings():
        for subject in binding.get("subjects") or ():
            if subject.get("kind") == "ServiceAccount" and subject.get("namespace") == "kube-system":
                accounts.add(subject["name"])
    return accounts


def test_every_controller_has_an_account_with_a_bound_role() -> None:
    controllers = set(discover())
    assert set(SERVICE_ACCOUNTS) <= controllers
    unbound = {name for name in controllers - OWN if service_account(name) not in bound_accounts()}
    assert not unbound


def test_accounts_are_upstreams_names() -> None:
    assert service_account("replicaset") == "replicaset-controller"
    assert service_account("garbagecollector") == "generic-garbage-collector"
    assert service_account("csrsigning") == service_account("csrapproving") == "certificate-controller"
    assert service_account("pyk8s-hostpath-provisioner") == "pyk8s-hostpath-provisioner"
