"""ValidatingAdmissionPolicy without a cluster: upstream's validation of policies and bindings, the
evaluation of one policy (variables, messages, errors, audit annotations) and the status type check."""

from __future__ import annotations

from typing import Any

from apiserver.admission.policy.evaluator import evaluate
from apiserver.admission.policy.source import compile_policy
from apiserver.controlplane.admissionpolicy_status import type_check
from apiserver.registry import crcel
from apiserver.registry.admissionregistration import (
    ValidatingAdmissionPolicyBindingStrategy,
    ValidatingAdmissionPolicyStrategy,
)
from services.api.catalog import BUILTIN, Catalog


def res(plural: str) -> Any:
    return next(r for r in BUILTIN if r.plural == plural)


def policy(**spec: Any) -> dict[str, Any]:
    base = {"matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                                    "resources": ["deployments"], "operations": ["CREATE"]}]},
            "validations": [{"expression": "object.spec.replicas <= 5"}]}
    return {"metadata": {"name": "p"}, "spec": {**base, **spec}}


def fields(causes: list[dict[str, str]]) -> set[str]:
    return {c["field"] for c in causes}


def test_policy_defaults_and_validation() -> None:
    strategy = ValidatingAdmissionPolicyStrategy(res("validatingadmissionpolicies"))
    obj = policy()
    strategy.defaults(obj)
    assert obj["spec"]["failurePolicy"] == "Fail"
    match = obj["spec"]["matchConstraints"]
    assert match["matchPolicy"] == "Equivalent" and match["namespaceSelector"] == {} and match["objectSelector"] == {}
    assert match["resourceRules"][0]["scope"] == "*"
    assert strategy.validate(obj) == []
    bad = policy(validations=[{"expression": "object.spec.replicas <=", "reason": "Teapot"},
                              {"expression": "true", "messageExpression": "1 + 1"}],
                 variables=[{"name": "not valid", "expression": "1"}], failurePolicy="Maybe",
                 auditAnnotations=[{"key": "a", "valueExpression": "'x'"}, {"key": "a", "valueExpression": "'y'"}],
                 matchConstraints={})
    assert {"spec.validations[0].expression", "spec.validations[0].reason", "spec.validations[1].messageExpression",
            "spec.variables[0].name", "spec.failurePolicy", "spec.auditAnnotations[1].key",
            "spec.matchConstraints.resourceRules"} <= fields(strategy.validate(bad))
    empty = policy(validations=[])
    assert "spec.validations" in fields(strategy.validate(empty))


def test_binding_validation() -> None:
    strategy = ValidatingAdmissionPolicyBindingStrategy(res("validatingadmissionpolicybindings"))
    good = {"metadata": {"name": "b"}, "spec": {"policyName": "p", "validationActions": ["Deny", "Audit"],
                                                "paramRef": {"name": "limits"}}}
    strategy.defaults(good)
    assert good["spec"]["paramRef"]["parameterNotFoundAction"] == "Deny"
    assert strategy.validate(good) == []
    bad = {"metadata": {"name": "b"}, "spec": {"validationActions": ["Deny", "Deny", "Shout"],
                                               "paramRef": {"name": "x", "selector": {}}}}
    assert {"spec.policyName", "spec.validationActions[1]", "spec.validationActions[2]", "spec.paramRef.name",
            "spec.paramRef.parameterNotFoundAction"} <= fields(strategy.validate(bad))


def _activation(obj: Any, params: Any = None) -> dict[str, Any]:
    return {"object": crcel.admission_value(obj), "oldObject": None, "request": crcel.admission_value({}),
            "params": crcel.admission_value(params), "namespaceObject": None}


def test_evaluation_messages_variables_and_annotations() -> None:
    compiled = compile_policy(policy(
        variables=[{"name": "limit", "expression": "int(params.max)"},
                   {"name": "broken", "expression": "object.nothere"},
                   {"name": "double", "expression": "variables.limit * 2"}],
        validations=[
            {"expression": "object.spec.replicas <= variables.limit",
             "messageExpression": "'at most ' + string(variables.limit)"},
            {"expression": "object.spec.replicas <= variables.double", "message": "way too many",
             "reason": "Forbidden"},
            {"expression": "object.spec.replicas < 100", "messageExpression": "''"},
            {"expression": "variables.broken == 1"},
        ],
        auditAnnotations=[{"key": "replicas", "valueExpression": "string(object.spec.replicas)"},
                          {"key": "none", "valueExpression": "null"}]))
    out = evaluate(compiled, _activation({"spec": {"replicas": 200}}, {"max": "5"}))
    assert [(f.message, f.reason, f.index) for f in out.failures] == [
        ("at most 5", "Invalid", 0), ("way too many", "Forbidden", 1),
        ("failed expression: object.spec.replicas < 100", "Invalid", 2)]
    # Only the validation that reads the broken variable errs.
    assert out.errors == ["expression 'variables.broken == 1' resulted in error: no such key: nothere"]
    assert out.annotations == {"p/replicas": "200"}
    assert evaluate(compiled, _activation({"spec": {"replicas": 3}}, {"max": "5"})).failures == []


def test_status_type_check_names_the_kind() -> None:
    catalog = Catalog()
    warnings = type_check(policy(validations=[{"expression": "object.spec.replicas > 1"},
                                              {"expression": "object.spec.replica > 1",
                                               "messageExpression": "object.metadata.name"}])["spec"], catalog)
    assert warnings == [{"fieldRef": "spec.validations[1].expression",
                         "warning": "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replica'\n"
                                    " | object.spec.replica > 1\n | ...........^"}]
    params = policy(paramKind={"apiVersion": "v1", "kind": "ConfigMap"},
                    validations=[{"expression": "object.spec.replicas <= int(params.dta.max)"}])
    assert type_check(params["spec"], catalog)[0]["warning"].startswith(
        "apps/v1, Kind=Deployment: ERROR: <input>:1:35: undefined field 'dta'")
    wildcard = policy(matchConstraints={"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"],
                                                           "resources": ["*"], "operations": ["*"]}]},
                      validations=[{"expression": "object.anything > 1"}, {"expression": "nope > 1"}])
    assert [w["fieldRef"] for w in type_check(wildcard["spec"], catalog)] == ["spec.validations[1].expression"]
