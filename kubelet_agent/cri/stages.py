"""What a hollow node's containers do, as stages like kwok's: the first stage whose selector matches a
pod decides how each of its app containers ends.

The default set follows kwok's default pod stages: every pod is Running and Ready with an IP at once,
and the app containers of a pod owned by a Job (restartPolicy Never or OnFailure) exit 0 (terminated,
reason Completed) after the Job duration, so the pod ends Succeeded and the Job completes. Every other
container runs until it is stopped; stopping one takes no time, as for a process that exits on SIGTERM.

`--hollow-stages FILE` replaces the defaults with a YAML document of this shape:

    apiVersion: pyk8s.io/v1alpha1
    kind: HollowStages
    stages:
    - name: job-fails             # for logs and error messages
      selector:                   # every given field must match; an empty selector matches every pod
        ownerKinds: [Job]         # the kind of one of the pod's ownerReferences
        restartPolicies: [Never]  # the pod's spec.restartPolicy (default Always)
        matchLabels: {app: x}     # labels the pod has, with these values
        matchAnnotations: {}      # the same for annotations
        containers: [work]        # names of the app containers it applies to (default: all of them)
      delay: 2s                   # after the container starts (a Go duration or seconds)
      jitter: 1s                  # plus a random part of up to this much
      next:                       # how the container ends; nothing here: it runs until stopped
        exitCode: 3               # it exits with this code (reason Completed for 0, Error otherwise)
        # startError: "no GPU"    # or: starting it fails with this message

The pod's phase follows from its containers as the kubelet computes it (restartPolicy decides whether
an exited container runs again, and each run ends the same way). A pod annotation
`hollow.pyk8s.io/container.<name>` still overrides every stage for that container.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from services.runtime.durations import duration

DEFAULT_JOB_DURATION = 2.0
KIND = "HollowStages"


@dataclass(frozen=True)
class Selector:
    owner_kinds: tuple[str, ...] = ()
    restart_policies: tuple[str, ...] = ()
    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_annotations: Mapping[str, str] = field(default_factory=dict)
    containers: tuple[str, ...] = ()

    def matches(self, pod: Mapping[str, Any], container: str) -> bool:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if self.owner_kinds and not any(ref.get("kind") in self.owner_kinds
                                        for ref in meta.get("ownerReferences") or []):
            return False
        if self.restart_policies and (spec.get("restartPolicy") or "Always") not in self.restart_policies:
            return False
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        if any(annotations.get(k) != v for k, v in self.match_annotations.items()):
            return False
        return not self.containers or container in self.containers


@dataclass(frozen=True)
class Stage:
    name: str
    selector: Selector
    delay: float = 0.0
    jitter: float = 0.0
    exit_code: int | None = None
    start_error: str | None = None

    def behavior(self, delay: float) -> dict[str, str]:
        """The hollow runtime's script for one run of a container (the shape of its pod annotation)."""
        if self.start_error is not None:
            return {"fail": self.start_error}
        if self.exit_code is not None:
            return {"exit": str(self.exit_code), "after": str(delay)}
        return {}


def default_stages(job_duration: float = DEFAULT_JOB_DURATION) -> list[Stage]:
    return [Stage("job-complete", Selector(owner_kinds=("Job",), restart_policies=("Never", "OnFailure")),
                  delay=job_duration, exit_code=0)]


def select(stages: list[Stage], pod: Mapping[str, Any], container: str) -> Stage | None:
    return next((s for s in stages if s.selector.matches(pod, container)), None)


def load_stages(path: str) -> list[Stage]:
    """Stages from a YAML file; ValueError naming the file and the field that is wrong."""
    try:
        with open(path) as f:
            doc = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    return parse_stages(doc, path)


def parse_stages(doc: Any, where: str = "stages") -> list[Stage]:
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: expected a {KIND} document")
    if doc.get("kind") not in (None, KIND):
        raise ValueError(f"{where}: kind {doc.get('kind')!r} is not {KIND}")
    items = doc.get("stages")
    if not isinstance(items, list):
        raise ValueError(f"{where}: stages: expected a list")
    return [_stage(item, f"{where}: stages[{i}]") for i, item in enumerate(items)]


def _stage(item: Any, where: str) -> Stage:
    if not isinstance(item, dict):
        raise ValueError(f"{where}: expected a mapping")
    unknown = set(item) - {"name", "selector", "delay", "jitter", "next"}
    if unknown:
        raise ValueError(f"{where}: unknown field {sorted(unknown)[0]!r}")
    selector = item.get("selector") or {}
    if not isinstance(selector, dict):
        raise ValueError(f"{where}.selector: expected a mapping")
    fields = {"ownerKinds": "owner_kinds", "restartPolicies": "restart_policies", "containers": "containers"}
    unknown = set(selector) - {*fields, "matchLabels", "matchAnnotations"}
    if unknown:
        raise ValueError(f"{where}.selector: unknown field {sorted(unknown)[0]!r}")
    kwargs: dict[str, Any] = {}
    for key, attr in fields.items():
        value = selector.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{where}.selector.{key}: expected a list of strings")
        kwargs[attr] = tuple(value)
    for key, attr in (("matchLabels", "match_labels"), ("matchAnnotations", "match_annotations")):
        value = selector.get(key) or {}
        if not isinstance(value, dict):
            raise ValueError(f"{where}.selector.{key}: expected a mapping")
        kwargs[attr] = {str(k): str(v) for k, v in value.items()}
    nxt = item.get("next") or {}
    if not isinstance(nxt, dict) or set(nxt) - {"exitCode", "startError"}:
        raise ValueError(f"{where}.next: expected exitCode or startError")
    if "exitCode" in nxt and "startError" in nxt:
        raise ValueError(f"{where}.next: exitCode and startError are exclusive")
    exit_code = nxt.get("exitCode")
    if exit_code is not None and (not isinstance(exit_code, int) or not 0 <= exit_code <= 255):
        raise ValueError(f"{where}.next.exitCode: expected an integer from 0 to 255")
    start_error = nxt.get("startError")
    times = {}
    for key in ("delay", "jitter"):
        try:
            times[key] = duration(item.get(key, 0))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}.{key}: {exc}") from None
        if times[key] < 0:
            raise ValueError(f"{where}.{key}: must not be negative")
    return Stage(str(item.get("name") or where), Selector(**kwargs), times["delay"], times["jitter"], exit_code,
                 None if start_error is None else str(start_error))
