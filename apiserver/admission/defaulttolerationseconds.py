"""The DefaultTolerationSeconds admission plugin: a pod that does not tolerate the not-ready or the
unreachable NoExecute taint gets a toleration for it, for --default-not-ready-toleration-seconds and
--default-unreachable-toleration-seconds (300 s each), so it moves off a dead node after five minutes."""

from __future__ import annotations

from apiserver.admission.interfaces import CREATE, UPDATE, Attributes, MutationInterface, PluginConfig

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"


class DefaultTolerationSeconds(MutationInterface):
    name = "DefaultTolerationSeconds"
    operations = frozenset({CREATE, UPDATE})
    resources = frozenset({("", "pods")})

    def __init__(self, config: PluginConfig) -> None:
        super().__init__(config)
        #: taint key -> seconds a pod stays on a node with that taint
        self.seconds = {NOT_READY_TAINT: config.not_ready_toleration_seconds,
                        UNREACHABLE_TAINT: config.unreachable_toleration_seconds}

    async def admit(self, a: Attributes) -> None:
        spec = a.obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        tolerations = spec.get("tolerations") or []
        if not isinstance(tolerations, list):
            return
        added = []
        for key, seconds in self.seconds.items():
            if any(isinstance(t, dict) and t.get("key") in (None, "", key)
                   and t.get("effect") in (None, "", "NoExecute") for t in tolerations):
                continue
            added.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds})
        if added:
            spec["tolerations"] = [*tolerations, *added]
