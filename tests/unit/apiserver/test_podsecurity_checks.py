"""The Pod Security Standards checks against upstream's own test tables (policy/check_*_test.go):
each check's reason and detail word for word, versions and restricted's overrides of baseline."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.admission.podsecurity import api, checks


def run(fn: checks.CheckFn, spec: dict[str, Any], annotations: dict[str, str] | None = None) -> checks.Result | None:
    return fn({"annotations": annotations or {}}, spec)


def named(name: str, sc: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name} if sc is None else {"name": name, "securityContext": sc}


AA = checks.APPARMOR_ANNOTATION_PREFIX
SELINUX_1_31 = next(c for c in checks.CHECKS if c.id == "seLinuxOptions").versions[-1][1]


@pytest.mark.parametrize(("fn", "spec", "annotations", "reason", "detail"), [
    (checks.host_namespaces, {"hostNetwork": True, "hostIPC": True, "hostPID": True}, None,
     "host namespaces", "hostNetwork=true, hostPID=true, hostIPC=true"),
    (checks.privileged, {"containers": [named("a"), named("b", {}), named("c", {"privileged": False}),
                                        named("d", {"privileged": True}), named("e", {"privileged": True})]}, None,
     "privileged", 'containers "d", "e" must not set securityContext.privileged=true'),
    (checks.host_ports, {"containers": [{"name": "a", "ports": [{"hostPort": 0}]},
                                        {"name": "b", "ports": [{"hostPort": 0}, {"hostPort": 10}, {"hostPort": 20}]},
                                        {"name": "c", "ports": [{"hostPort": 0}, {"hostPort": 10}, {"hostPort": 30}]}]},
     None, "hostPort", 'containers "b", "c" use hostPorts 10, 20, 30'),
    (checks.host_path_volumes, {"volumes": [{"name": "a", "hostPath": {"path": ""}},
                                            {"name": "b", "hostPath": {"path": ""}}, {"name": "c", "emptyDir": {}}]},
     None, "hostPath volumes", 'volumes "a", "b"'),
    (checks.capabilities_baseline, {"containers": [
        named("a", {"capabilities": {"add": ["FOO", "BAR"]}}), named("b", {"capabilities": {"add": ["BAR", "BAZ"]}}),
        named("c", {"capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"]}})]}, None,
     "non-default capabilities",
     'containers "a", "b" must not include "BAR", "BAZ", "FOO" in securityContext.capabilities.add'),
    (checks.capabilities_restricted_1_22, {"containers": [
        named("a", {"capabilities": {"add": ["FOO", "BAR"]}}), named("b", {"capabilities": {"add": ["BAR", "BAZ"]}}),
        named("c", {"capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"], "drop": ["ALL", "FOO"]}})]}, None,
     "unrestricted capabilities",
     'containers "a", "b" must set securityContext.capabilities.drop=["ALL"]; containers "a", "b", "c" must not '
     'include "BAR", "BAZ", "CHOWN", "FOO" in securityContext.capabilities.add'),
    (checks.proc_mount, {"containers": [named("a"), named("b", {}), named("c", {"procMount": "Default"}),
                                        named("d", {"procMount": "Unmasked"}), named("e", {"procMount": "other"})]},
     None, "procMount", 'containers "d", "e" must not set securityContext.procMount to "Unmasked", "other"'),
    (checks.apparmor_profile, {"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}},
                               "initContainers": [named("bar", {"appArmorProfile": {"type": "Unconfined"}})]}, None,
     "forbidden AppArmor profile", 'container "bar" must not set AppArmor profile type to "Unconfined"'),
    (checks.apparmor_profile, {}, {AA: "bogus", AA + "a": "", AA + "b": "runtime/default", AA + "c": "localhost/",
                                   AA + "e": "unconfined"},
     "forbidden AppArmor profiles",
     f'annotations must not set AppArmor profile type to "{AA}=\\"bogus\\"", "{AA}e=\\"unconfined\\""'),
    (SELINUX_1_31, {"securityContext": {"seLinuxOptions": {"type": "foo", "user": "bar"}},
                                        "containers": [named("a", {"seLinuxOptions": {"type": "container_engine_t"}}),
                                                       named("e", {"seLinuxOptions": {"type": "bar"}}),
                                                       named("g", {"seLinuxOptions": {"role": "baz"}})]}, None,
     "seLinuxOptions", 'pod and containers "e", "g" set forbidden securityContext.seLinuxOptions: types "bar", '
                       '"foo"; user may not be set; role may not be set'),
    (checks.seccomp_baseline_1_0, {"containers": [named("a"), named("b")]},
     {checks.SECCOMP_POD_ANNOTATION: "unconfined", checks.SECCOMP_CONTAINER_ANNOTATION_PREFIX + "a": "unconfined",
      checks.SECCOMP_CONTAINER_ANNOTATION_PREFIX + "b": "runtime/default"},
     "seccompProfile", f'forbidden annotations {checks.SECCOMP_CONTAINER_ANNOTATION_PREFIX}a="unconfined", '
                       f'{checks.SECCOMP_POD_ANNOTATION}="unconfined"'),
    (checks.seccomp_restricted_1_19, {"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                                      "containers": [named("a"), named("c", {"seccompProfile": {"type": "Unconfined"}}),
                                                     named("d", {"seccompProfile": {"type": "Unconfined"}})]}, None,
     "seccompProfile", 'containers "c", "d" must not set securityContext.seccompProfile.type to "Unconfined"'),
    (checks.seccomp_restricted_1_19, {"containers": [named("a"), named("b", {}),
                                                     named("d", {"seccompProfile": {"type": "RuntimeDefault"}})]}, None,
     "seccompProfile", 'pod or containers "a", "b" must set securityContext.seccompProfile.type to "RuntimeDefault" '
                       'or "Localhost"'),
    (checks.run_as_non_root, {"securityContext": {"runAsNonRoot": True}, "containers": [
        named("a"), named("c", {"runAsNonRoot": False}), named("d", {"runAsNonRoot": False})]}, None,
     "runAsNonRoot != true", 'containers "c", "d" must not set securityContext.runAsNonRoot=false'),
    (checks.run_as_user, {"securityContext": {"runAsUser": 0}, "containers": [named("a", {"runAsUser": 0})]}, None,
     "runAsUser=0", 'pod and container "a" must not set runAsUser=0'),
    (checks.windows_host_process, {"securityContext": {"windowsOptions": {"hostProcess": True}},
                                   "containers": [named("a"), named("d", {"windowsOptions": {"hostProcess": False}}),
                                                  named("e", {"windowsOptions": {"hostProcess": True}})]}, None,
     "hostProcess", 'pod and container "e" must not set securityContext.windowsOptions.hostProcess=true'),
    (checks.restricted_volumes, {"volumes": [{"name": "ok", "configMap": {}}, {"name": "img", "image": {}},
                                             {"name": "b1", "hostPath": {"path": "/"}}, {"name": "b2", "nfs": {}},
                                             {"name": "c1"}]}, None,
     "restricted volume types", 'volumes "b1", "b2", "c1" use restricted volume types "hostPath", "nfs", "unknown"'),
])
def test_check_messages(fn: checks.CheckFn, spec: dict[str, Any], annotations: dict[str, str] | None, reason: str,
                        detail: str) -> None:
    assert run(fn, spec, annotations) == checks.Result(reason, detail)


def test_sysctls_by_version() -> None:
    spec = {"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem"}, {"name": "kernel.msgmax"}]}}
    at = {minor: checks.evaluate(api.LevelVersion(api.BASELINE, api.Version(minor)), {}, spec) for minor in (31, 32)}
    assert at[31] == [checks.Result("forbidden sysctls", "net.ipv4.tcp_rmem, kernel.msgmax")]
    assert at[32] == [checks.Result("forbidden sysctls", "kernel.msgmax")]
    assert checks.evaluate(api.LevelVersion(api.BASELINE, api.LATEST), {}, spec) == at[32]


def test_windows_pods_skip_the_linux_only_restricted_checks_from_1_25() -> None:
    spec = {"os": {"name": "windows"}, "securityContext": {"runAsNonRoot": True}, "containers": [named("a")]}
    assert checks.evaluate(api.LevelVersion(api.RESTRICTED, api.LATEST), {}, spec) == []
    older = checks.evaluate(api.LevelVersion(api.RESTRICTED, api.Version(24)), {}, spec)
    assert [r.reason for r in older] == ["allowPrivilegeEscalation != false", "unrestricted capabilities",
                                         "seccompProfile"]


def test_restricted_replaces_the_baseline_checks_it_overrides() -> None:
    spec = {"volumes": [{"name": "h", "hostPath": {"path": "/"}}],
            "containers": [named("a", {"capabilities": {"add": ["SYS_ADMIN"]}})]}
    baseline = [r.reason for r in checks.evaluate(api.LevelVersion(api.BASELINE, api.LATEST), {}, spec)]
    assert baseline == ["non-default capabilities", "hostPath volumes"]
    restricted = [r.reason for r in checks.evaluate(api.LevelVersion(api.RESTRICTED, api.LATEST), {}, spec)]
    assert restricted == ["allowPrivilegeEscalation != false", "unrestricted capabilities", "restricted volume types",
                          "runAsNonRoot != true", "seccompProfile"]
    # before v1.22 restricted had no capabilities check of its own, so baseline's ran
    v21 = [r.reason for r in checks.evaluate(api.LevelVersion(api.RESTRICTED, api.Version(21)), {}, spec)]
    assert v21[0] == "non-default capabilities" and "unrestricted capabilities" not in v21


def test_policy_labels() -> None:
    p = api.LABEL_PREFIX
    policy, problems = api.policy_to_evaluate({f"{p}enforce": "baseline", f"{p}enforce-version": "v1.25",
                                               f"{p}audit": "restricted"}, api.Policy())
    assert problems == []
    assert str(policy.enforce) == "baseline:v1.25" and str(policy.audit) == "restricted:latest"
    assert str(policy.warn) == "baseline:v1.25", "an unset warn follows a stricter enforce"
    policy, problems = api.policy_to_evaluate({f"{p}enforce": "strict", f"{p}warn": "nope"}, api.Policy())
    assert [c["field"] for c in problems] == [f"metadata.labels[{p}enforce]", f"metadata.labels[{p}warn]"]
    assert policy.enforce.level == api.RESTRICTED and policy.warn.level == api.PRIVILEGED, \
        "a bad enforce level fails closed, a bad warn level open"


def test_configuration_is_validated() -> None:
    with pytest.raises(api.ConfigurationError, match="defaults.enforce: Invalid value: 'strict'"):
        api.load_configuration({"apiVersion": "pod-security.admission.config.k8s.io/v1",
                                "kind": "PodSecurityConfiguration", "defaults": {"enforce": "strict"}})
    with pytest.raises(api.ConfigurationError, match='exemptions.namespaces\\[1\\]: Duplicate value: "a"'):
        api.load_configuration({"apiVersion": "pod-security.admission.config.k8s.io/v1",
                                "kind": "PodSecurityConfiguration", "exemptions": {"namespaces": ["a", "a"]}})
