"""flowcontrol.apiserver.k8s.io/v1 FlowSchema and PriorityLevelConfiguration: upstream's defaults and the
validation that keeps them meaningful. Nothing enforces them yet (API Priority and Fairness is not
implemented); the objects exist because clients and operators read and write them."""

from __future__ import annotations

from typing import Any

from apiserver.registry.base import GenerationStrategy, setdefault
from apiserver.registry.strategy import Cause, Obj
from services.api import validation as v

SUBJECT_KINDS = ("Group", "ServiceAccount", "User")
DISTINGUISHER_TYPES = ("ByNamespace", "ByUser")
PRIORITY_LEVEL_TYPES = ("Exempt", "Limited")
LIMIT_RESPONSE_TYPES = ("Queue", "Reject")


class FlowSchemaStrategy(GenerationStrategy):
    def defaults(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict) and not spec.get("matchingPrecedence"):
            spec["matchingPrecedence"] = 1000

    def validate_spec(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes: list[Cause] = []
        if not ((spec.get("priorityLevelConfiguration") or {}).get("name")):
            causes.append(v.required("spec.priorityLevelConfiguration.name", "must reference a priority level"))
        precedence = spec.get("matchingPrecedence")
        if not isinstance(precedence, int) or not 1 <= precedence <= 10000:
            causes.append(v.invalid("spec.matchingPrecedence", precedence, "must be between 1 and 10000 inclusively"))
        method = spec.get("distinguisherMethod")
        if method is not None and method.get("type") not in DISTINGUISHER_TYPES:
            causes.append(v.not_supported("spec.distinguisherMethod.type", method.get("type"), DISTINGUISHER_TYPES))
        for i, rule in enumerate(spec.get("rules") or []):
            causes += _validate_rule(rule, f"spec.rules[{i}]")
        return causes


def _validate_rule(rule: dict[str, Any], path: str) -> list[Cause]:
    causes: list[Cause] = []
    subjects = rule.get("subjects") or []
    if not subjects:
        causes.append(v.required(f"{path}.subjects", "subjects must contain at least one value"))
    for i, subject in enumerate(subjects):
        kind = subject.get("kind")
        if kind not in SUBJECT_KINDS:
            causes.append(v.not_supported(f"{path}.subjects[{i}].kind", kind, SUBJECT_KINDS))
            continue
        field = {"Group": "group", "User": "user", "ServiceAccount": "serviceAccount"}[kind]
        if not (subject.get(field) or {}).get("name"):
            causes.append(v.required(f"{path}.subjects[{i}].{field}.name", f"{field} name is required"))
    if not rule.get("resourceRules") and not rule.get("nonResourceRules"):
        causes.append(v.required(path, "at least one of resourceRules and nonResourceRules has to be non-empty"))
    for i, res in enumerate(rule.get("resourceRules") or []):
        for key in ("verbs", "apiGroups", "resources"):
            if not res.get(key):
                causes.append(v.required(f"{path}.resourceRules[{i}].{key}", f"{key} must contain at least one value"))
        if not res.get("namespaces") and not res.get("clusterScope"):
            causes.append(v.required(f"{path}.resourceRules[{i}].namespaces",
                                     "resource rules that are not cluster scoped must supply at least one namespace"))
    for i, res in enumerate(rule.get("nonResourceRules") or []):
        for key in ("verbs", "nonResourceURLs"):
            if not res.get(key):
                causes.append(v.required(f"{path}.nonResourceRules[{i}].{key}",
                                         f"{key} must contain at least one value"))
    return causes


class PriorityLevelConfigurationStrategy(GenerationStrategy):
    def defaults(self, obj: Obj) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        limited, exempt = spec.get("limited"), spec.get("exempt")
        if isinstance(limited, dict):
            setdefault(limited, "nominalConcurrencyShares", 30)
            setdefault(limited, "lendablePercent", 0)
            response = limited.setdefault("limitResponse", {})
            if isinstance(response, dict) and isinstance(response.get("queuing"), dict):
                queuing = response["queuing"]
                for key, value in (("queues", 64), ("handSize", 8), ("queueLengthLimit", 50)):
                    if not queuing.get(key):
                        queuing[key] = value
        if isinstance(exempt, dict):
            setdefault(exempt, "nominalConcurrencyShares", 0)
            setdefault(exempt, "lendablePercent", 0)

    def validate_spec(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") or {}
        kind = spec.get("type")
        if kind not in PRIORITY_LEVEL_TYPES:
            return [v.not_supported("spec.type", kind, PRIORITY_LEVEL_TYPES)]
        limited = spec.get("limited")
        if kind == "Exempt":
            return [v.forbidden("spec.limited", "must be nil if the type is not Limited")] if limited else []
        if spec.get("exempt") is not None:
            return [v.forbidden("spec.exempt", "must be nil if the type is Limited")]
        if not isinstance(limited, dict):
            return [v.required("spec.limited", "must not be empty when type is Limited")]
        causes: list[Cause] = []
        shares = limited.get("nominalConcurrencyShares")
        if not isinstance(shares, int) or shares < 0:
            causes.append(v.invalid("spec.limited.nominalConcurrencyShares", shares, "must be a non-negative integer"))
        lendable = limited.get("lendablePercent")
        if lendable is not None and not (isinstance(lendable, int) and 0 <= lendable <= 100):
            causes.append(v.invalid("spec.limited.lendablePercent", lendable, "must be between 0 and 100, inclusive"))
        response = limited.get("limitResponse") or {}
        rtype = response.get("type")
        if rtype not in LIMIT_RESPONSE_TYPES:
            causes.append(v.not_supported("spec.limited.limitResponse.type", rtype, LIMIT_RESPONSE_TYPES))
        elif rtype == "Reject" and response.get("queuing") is not None:
            causes.append(v.forbidden("spec.limited.limitResponse.queuing", "must be nil if limited.limitResponse.type "
                                                                           "is not Limited"))
        elif rtype == "Queue":
            queuing = response.get("queuing")
            if not isinstance(queuing, dict):
                causes.append(v.required("spec.limited.limitResponse.queuing",
                                         "must not be empty if limited.limitResponse.type is Queue"))
            elif queuing.get("handSize", 0) > queuing.get("queues", 0):
                causes.append(v.invalid("spec.limited.limitResponse.queuing.handSize", queuing.get("handSize"),
                                        f"should not be greater than queues ({queuing.get('queues')})"))
        return causes
