"""The PodSecurity admission plugin, as upstream's pod-security-admission `admission` package:

- a pod's create (and an update that changes an image or adds an ephemeral container) is refused
  with 403 when it breaks its namespace's `enforce` policy, and otherwise answered with a warning
  when it breaks the `warn` one; the `audit` policy's violations go to the audit event;
- a workload (Deployment, Job, ...) is never refused, but its pod template is held to `warn` and
  `audit`, so `kubectl create deployment` in a restricted namespace says what its pods will break;
- a namespace's `pod-security.kubernetes.io/*` labels must parse (422 otherwise), and tightening
  `enforce` on a namespace warns about the pods already in it that the new level would refuse.

The PodSecurityConfiguration (from --admission-control-config-file) gives the policy of unlabeled
namespaces and exempts users, namespaces and runtime classes. Namespaces and pods are read from the
watch cache (a namespace it has not seen yet from etcd), as upstream reads informers.
"""

from __future__ import annotations

import bisect
import time
from typing import Any

import orjson

from apiserver.admission import request
from apiserver.admission.interfaces import CREATE, UPDATE, Attributes, Obj, PluginConfig, ValidationInterface
from apiserver.admission.podsecurity import api, checks
from services.api import errors

#: what upstream's DefaultPodSpecExtractor knows: (group, plural) -> the path to the pod template
POD_CONTROLLERS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "replicationcontrollers"): ("spec", "template"),
    ("", "podtemplates"): ("template",),
    ("apps", "replicasets"): ("spec", "template"),
    ("apps", "deployments"): ("spec", "template"),
    ("apps", "statefulsets"): ("spec", "template"),
    ("apps", "daemonsets"): ("spec", "template"),
    ("batch", "jobs"): ("spec", "template"),
    ("batch", "cronjobs"): ("spec", "jobTemplate", "spec", "template"),
}
#: how many existing pods a tightened enforce level is checked against, and for how long
NAMESPACE_MAX_PODS = 3000
NAMESPACE_CHECK_SECONDS = 1.0
SECCOMP_CONTAINER_ANNOTATION_PREFIX = checks.SECCOMP_CONTAINER_ANNOTATION_PREFIX


class PodSecurity(ValidationInterface):
    name = "PodSecurity"
    operations = frozenset({CREATE, UPDATE})
    resources = frozenset({("", "pods"), ("", "namespaces"), *POD_CONTROLLERS})
    subresources = frozenset({"", "ephemeralcontainers"})

    def __init__(self, config: PluginConfig) -> None:
        super().__init__(config)
        self.settings = api.load_configuration(config.plugin_configs.get(self.name))
        self.namespaces_prefix = f"{config.root}namespaces/"
        self.pods_prefix = f"{config.root}pods/"

    async def validate(self, a: Attributes) -> None:
        kind = (a.resource.group, a.resource.plural)
        if kind == ("", "namespaces"):
            if not a.subresource:
                self._namespace(a)
        elif kind == ("", "pods"):
            await self._pod(a)
        elif not a.subresource:
            await self._controller(a)

    # -- pods and their controllers ----------------------------------------------------------------

    def _exempt(self, a: Attributes) -> bool:
        """Exempt namespaces and users, noted for the audit log as upstream does."""
        req = request.current()
        if a.namespace in self.settings.namespaces:
            req.annotate(f"{api.LABEL_PREFIX}exempt", "namespace")
            return True
        if req.user is not None and req.user.name in self.settings.usernames:
            req.annotate(f"{api.LABEL_PREFIX}exempt", "user")
            return True
        return False

    async def _pod(self, a: Attributes) -> None:
        if self._exempt(a):
            return
        policy, problems = api.policy_to_evaluate(await self._namespace_labels(a.namespace), self.settings.defaults)
        if not problems and policy.fully_privileged:
            return
        if a.operation == UPDATE and not significant_pod_update(a.obj, a.old or {}):
            return
        self._evaluate(a, policy, problems, a.obj.get("metadata") or {}, a.obj.get("spec") or {}, enforce=True)

    async def _controller(self, a: Attributes) -> None:
        if self._exempt(a):
            return
        policy, problems = api.policy_to_evaluate(await self._namespace_labels(a.namespace), self.settings.defaults)
        if not problems and policy.warn.level == api.PRIVILEGED and policy.audit.level == api.PRIVILEGED:
            return
        template: Any = a.obj
        for key in POD_CONTROLLERS[(a.resource.group, a.resource.plural)]:
            template = template.get(key) if isinstance(template, dict) else None
        if not isinstance(template, dict):
            return
        self._evaluate(a, policy, problems, template.get("metadata") or {}, template.get("spec") or {}, enforce=False)

    def _evaluate(self, a: Attributes, policy: api.Policy, problems: list[dict[str, str]], meta: Obj, spec: Obj,
                  enforce: bool) -> None:
        """Upstream's EvaluatePod: refuse on enforce, note audit violations, warn (unless refusing)."""
        req = request.current()
        if spec.get("runtimeClassName") and spec["runtimeClassName"] in self.settings.runtime_classes:
            req.annotate(f"{api.LABEL_PREFIX}exempt", "runtimeClass")
            return
        if problems:
            req.annotate(f"{api.LABEL_PREFIX}error", "Failed to parse policy: " + _aggregate(problems))
        results: dict[api.LevelVersion, list[checks.Result]] = {}

        def failures(lv: api.LevelVersion) -> list[checks.Result]:
            if lv not in results:
                results[lv] = checks.evaluate(lv, meta, spec)
            return results[lv]

        refusal = None
        if enforce:
            req.annotate(api.ENFORCE_POLICY_ANNOTATION, str(policy.enforce))
            failed = failures(policy.enforce)
            if failed:
                refusal = errors.forbidden(a.resource.plural, a.resource.group, a.name,
                                           f"violates PodSecurity {_quote(str(policy.enforce))}: "
                                           f"{checks.forbidden_detail(failed)}")
        audited = failures(policy.audit)
        if audited:
            req.annotate(api.AUDIT_VIOLATIONS_ANNOTATION, f"would violate PodSecurity {_quote(str(policy.audit))}: "
                                                          f"{checks.forbidden_detail(audited)}")
        if refusal is not None:
            raise refusal
        warned = failures(policy.warn)
        if warned:
            req.warn(f"would violate PodSecurity {_quote(str(policy.warn))}: {checks.forbidden_detail(warned)}")

    # -- namespaces --------------------------------------------------------------------------------

    def _namespace(self, a: Attributes) -> None:
        labels = (a.obj.get("metadata") or {}).get("labels") or {}
        name = (a.obj.get("metadata") or {}).get("name") or ""
        policy, problems = api.policy_to_evaluate(labels, self.settings.defaults)
        if a.operation == CREATE:
            if problems:
                raise errors.invalid("Namespace", "", name, problems)
            self._warn_if_exempt(name, policy, labels)
            return
        old_labels = ((a.old or {}).get("metadata") or {}).get("labels") or {}
        old_policy, old_problems = api.policy_to_evaluate(old_labels, self.settings.defaults)
        if problems and problems != old_problems:
            raise errors.invalid("Namespace", "", name, problems)
        new, old = policy.enforce, old_policy.enforce
        if new == old or new.level == api.PRIVILEGED:
            return
        if new.version == old.version and api.compare_levels(new.level, old.level) < 1:
            return
        if name in self.settings.namespaces:
            self._warn_if_exempt(name, policy, labels)
            return
        req = request.current()
        for warning in self._existing_pods(name, new):
            req.warn(warning)

    def _warn_if_exempt(self, name: str, policy: api.Policy, labels: dict[str, str]) -> None:
        """Labels on an exempt namespace do nothing; upstream says so."""
        if name not in self.settings.namespaces or policy.fully_privileged or \
                _equivalent(policy, self.settings.defaults):
            return
        modes = []
        for mode in api.MODES:
            lv: api.LevelVersion = getattr(policy, mode)
            explicit = f"{api.LABEL_PREFIX}{mode}" in labels or f"{api.LABEL_PREFIX}{mode}-version" in labels
            if lv.level != api.PRIVILEGED and explicit:
                modes.append(f"{mode}={lv}")
        request.current().warn(f"namespace {_quote(name)} is exempt from Pod Security, and the policy "
                               f"({', '.join(modes)}) will be ignored")

    def _existing_pods(self, namespace: str, enforce: api.LevelVersion) -> list[str]:
        """Upstream's EvaluatePodsInNamespace: one warning per distinct set of failed checks, named
        by its lexically first pod, each controller's pods checked after one of every other's."""
        cache = self.config.cache.resources.get(self.pods_prefix)
        start = f"{self.pods_prefix}{namespace}/"
        pods: list[Obj] = []
        if cache is not None:
            keys = cache.sorted_keys()
            for key in keys[bisect.bisect_left(keys, start):]:
                if not key.startswith(start):
                    break
                pods.append(cache.entries[key].obj)
        first: list[Obj] = []
        repeats: list[Obj] = []
        controllers: set[str] = set()
        for pod in pods:
            if (pod.get("spec") or {}).get("runtimeClassName") in self.settings.runtime_classes:
                continue
            owner = next((r.get("uid") for r in pod["metadata"].get("ownerReferences") or []
                          if r.get("controller")), None)
            if owner is not None and owner in controllers:
                repeats.append(pod)
                continue
            if owner is not None:
                controllers.add(owner)
            first.append(pod)
        ordered = first + repeats
        total = len(ordered)
        ordered = ordered[:NAMESPACE_MAX_PODS]
        deadline = time.monotonic() + NAMESPACE_CHECK_SECONDS
        counts: dict[str, tuple[str, int]] = {}
        checked = len(ordered)
        for i, pod in enumerate(ordered):
            failed = checks.evaluate(enforce, pod["metadata"], pod.get("spec") or {})
            if failed:
                reason = checks.forbidden_reason(failed)
                name = pod["metadata"].get("name", "")
                seen_name, count = counts.get(reason, (name, 0))
                counts[reason] = (min(seen_name, name), count + 1)
            if time.monotonic() > deadline:
                checked = i + 1
                break
        warnings = []
        if checked < total:
            warnings.append(f"new PodSecurity enforce level only checked against the first {checked} of {total} "
                            "existing pods")
        if counts:
            warnings.append(f"existing pods in namespace {_quote(namespace)} violate the new PodSecurity enforce "
                            f"level {_quote(str(enforce))}")
        return warnings + sorted(_decorate(name, count, reason) for reason, (name, count) in counts.items())

    async def _namespace_labels(self, namespace: str) -> dict[str, str]:
        key = self.namespaces_prefix + namespace
        cache = self.config.cache.resources.get(self.namespaces_prefix)
        entry = cache.entries.get(key) if cache is not None else None
        if entry is not None:
            ns = entry.obj
        else:
            kv = await self.config.cache.store.get(key)
            if kv is None:
                raise errors.internal(f"failed to lookup namespace {_quote(namespace)}")
            ns = orjson.loads(kv.value)
        return (ns.get("metadata") or {}).get("labels") or {}


def _decorate(name: str, count: int, warning: str) -> str:
    if count == 1:
        return f"{name}: {warning}"
    others = count - 1
    return f"{name} (and {others} other {'pod' if others == 1 else 'pods'}): {warning}"


def _equivalent(a: api.Policy, b: api.Policy) -> bool:
    """Same policy in effect: each mode equal, or privileged in both whatever the version."""
    return all(x == y or (x.level == api.PRIVILEGED and y.level == api.PRIVILEGED)
               for x, y in ((a.enforce, b.enforce), (a.audit, b.audit), (a.warn, b.warn)))


def _quote(text: str) -> str:
    return checks.join_quote([text])


def _aggregate(problems: list[dict[str, str]]) -> str:
    texts = [f"{p['field']}: {p['message']}" for p in problems]
    return texts[0] if len(texts) == 1 else f"[{', '.join(texts)}]"


def significant_pod_update(pod: Obj, old: Obj) -> bool:
    """Whether an update can change what the policy sees (upstream's isSignificantPodUpdate): a changed
    image or seccomp annotation, a container added or removed, or a new ephemeral container."""
    spec, old_spec = pod.get("spec") or {}, old.get("spec") or {}
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    old_annotations = (old.get("metadata") or {}).get("annotations") or {}

    def changed(c: Obj, o: Obj) -> bool:
        key = SECCOMP_CONTAINER_ANNOTATION_PREFIX + str(c.get("name") or "")
        return c.get("image") != o.get("image") or annotations.get(key) != old_annotations.get(key)

    for field in ("containers", "initContainers"):
        new_list, old_list = spec.get(field) or [], old_spec.get(field) or []
        if len(new_list) != len(old_list) or any(changed(c, o) for c, o in zip(new_list, old_list, strict=True)):
            return True
    old_ephemeral = {c.get("name"): c for c in old_spec.get("ephemeralContainers") or []}
    for c in spec.get("ephemeralContainers") or []:
        before = old_ephemeral.get(c.get("name"))
        if before is None or changed(c, before):
            return True
    return False
