"""Jobs and CronJobs: defaults, the generated selector, restart-policy rules and cron syntax."""

from __future__ import annotations

import copy
import zoneinfo

from apiserver.registry.base import GenerationStrategy, child, get, setdefault
from apiserver.registry.podspec import default_pod_template, validate_pod_template
from apiserver.registry.strategy import Cause, Obj
from services.api import validation as v

CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
LEGACY_CONTROLLER_UID = "controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME = "job-name"
JOB_RESTART_POLICIES = ("OnFailure", "Never")
CONCURRENCY_POLICIES = ("Allow", "Forbid", "Replace")
COMPLETION_MODES = ("NonIndexed", "Indexed")


def default_job_spec(spec: Obj) -> None:
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    setdefault(spec, "parallelism", 1)
    setdefault(spec, "backoffLimit", 2**31 - 1 if spec.get("backoffLimitPerIndex") is not None else 6)
    setdefault(spec, "completionMode", "NonIndexed")
    setdefault(spec, "suspend", False)
    setdefault(spec, "podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    default_pod_template(spec.get("template"))


def validate_job_spec(spec: Obj, path: str) -> list[Cause]:
    causes: list[Cause] = []
    for key in ("parallelism", "completions", "backoffLimit", "ttlSecondsAfterFinished"):
        causes.extend(v.validate_nonnegative(spec.get(key), f"{path}.{key}"))
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and deadline <= 0:
        causes.append(v.invalid(f"{path}.activeDeadlineSeconds", deadline, "must be greater than 0"))
    mode = spec.get("completionMode")
    if mode is not None and mode not in COMPLETION_MODES:
        causes.append(v.not_supported(f"{path}.completionMode", mode, COMPLETION_MODES))
    if mode == "Indexed" and spec.get("completions") is None:
        causes.append(v.required(f"{path}.completions", "when completion mode is Indexed"))
    causes.extend(v.validate_label_selector(spec.get("selector"), f"{path}.selector"))
    template = spec.get("template")
    if template is None:
        causes.append(v.required(f"{path}.template"))
        return causes
    selector = spec.get("selector")
    labels = get(template, "metadata", "labels", default={})
    if selector and not v.selector_matches(selector, labels):
        causes.append(v.invalid(f"{path}.template.metadata.labels", labels,
                                "`selector` does not match template `labels`"))
    causes.extend(validate_pod_template(template, f"{path}.template"))
    restart = get(template, "spec", "restartPolicy", default="")
    if restart not in JOB_RESTART_POLICIES:
        causes.append(v.not_supported(f"{path}.template.spec.restartPolicy", restart, JOB_RESTART_POLICIES))
    return causes


#: upstream's deleteOptionWarnings of the Job storage
JOB_DELETE_WARNING = ("child pods are preserved by default when jobs are deleted; set propagationPolicy=Background "
                      "to remove them or set propagationPolicy=Orphan to suppress this warning")


class JobStrategy(GenerationStrategy):
    def default_propagation(self) -> str | None:
        """batch/v1 keeps a deleted Job's pods unless told otherwise, for backward compatibility as upstream."""
        return "Orphan" if self.resource.version == "v1" else None

    def delete_warnings(self, propagation_set: bool) -> list[str]:
        return [] if propagation_set else [JOB_DELETE_WARNING]

    def defaults(self, obj: Obj) -> None:
        spec = child(obj, "spec")
        default_job_spec(spec)
        labels = get(spec, "template", "metadata", "labels")
        meta = child(obj, "metadata")
        if labels and not meta.get("labels"):
            meta["labels"] = copy.deepcopy(labels)

    def prepare_for_create(self, obj: Obj) -> None:
        """Unless spec.manualSelector, select the job's pods by its uid (set by the store before this)."""
        super().prepare_for_create(obj)
        spec = child(obj, "spec")
        if spec.get("manualSelector"):
            return
        meta = obj.get("metadata") or {}
        uid, name = meta.get("uid", ""), meta.get("name", "")
        labels = child(spec, "template", "metadata", "labels")
        labels.update({LEGACY_CONTROLLER_UID: uid, CONTROLLER_UID: uid, LEGACY_JOB_NAME: name, JOB_NAME: name})
        spec.setdefault("selector", {"matchLabels": {CONTROLLER_UID: uid}})
        if not meta.get("labels"):
            child(obj, "metadata")["labels"] = copy.deepcopy(labels)

    def validate_spec(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes = validate_job_spec(spec, "spec")
        uid = get(obj, "metadata", "uid")
        selector = spec.get("selector")
        if not spec.get("manualSelector"):
            if uid and selector and not v.selector_matches(selector, {CONTROLLER_UID: uid}):
                causes.append(v.invalid("spec.selector", selector, "`selector` not auto-generated"))
        elif selector is None:
            causes.append(v.required("spec.selector"))
        return causes

    def validate_spec_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = self.validate_spec(new)
        new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        for key in ("selector", "completionMode", "podFailurePolicy", "backoffLimitPerIndex"):
            causes.extend(v.validate_immutable(new_spec.get(key), old_spec.get(key), f"spec.{key}"))
        if old_spec.get("completionMode") != "Indexed" or new_spec.get("completions") != new_spec.get("parallelism"):
            causes.extend(v.validate_immutable(new_spec.get("completions"), old_spec.get("completions"),
                                               "spec.completions"))
        suspended = old_spec.get("suspend") and not get(old, "status", "startTime")
        if not suspended:
            causes.extend(v.validate_immutable(new_spec.get("template"), old_spec.get("template"), "spec.template"))
        return causes

    def field_set(self, obj: Obj) -> dict[str, str]:
        fields = super().field_set(obj)
        fields["status.successful"] = str(get(obj, "status", "succeeded", default=0))
        return fields


class CronJobStrategy(GenerationStrategy):
    def defaults(self, obj: Obj) -> None:
        spec = child(obj, "spec")
        setdefault(spec, "concurrencyPolicy", "Allow")
        setdefault(spec, "suspend", False)
        setdefault(spec, "successfulJobsHistoryLimit", 3)
        setdefault(spec, "failedJobsHistoryLimit", 1)
        default_pod_template(get(spec, "jobTemplate", "spec", "template"))

    def validate(self, obj: Obj) -> list[Cause]:
        causes = super().validate(obj)
        name = get(obj, "metadata", "name", default="")
        if len(name) > 52:
            causes.append(v.invalid("metadata.name", name, "must be no more than 52 characters"))
        return causes

    def validate_spec(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") or {}
        causes: list[Cause] = []
        schedule = spec.get("schedule") or ""
        if not schedule:
            causes.append(v.required("spec.schedule"))
        else:
            error = cron_error(schedule)
            if error:
                causes.append(v.invalid("spec.schedule", schedule, error))
        tz = spec.get("timeZone")
        if tz is not None:
            try:
                zoneinfo.ZoneInfo(tz)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                causes.append(v.invalid("spec.timeZone", tz, f"unknown time zone {tz}"))
        policy = spec.get("concurrencyPolicy") or ""
        if policy not in CONCURRENCY_POLICIES:
            causes.append(v.not_supported("spec.concurrencyPolicy", policy, CONCURRENCY_POLICIES))
        for key in ("startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
            causes.extend(v.validate_nonnegative(spec.get(key), f"spec.{key}"))
        job_spec = get(spec, "jobTemplate", "spec")
        if job_spec is None:
            causes.append(v.required("spec.jobTemplate.spec"))
        else:
            causes.extend(validate_job_spec(job_spec, "spec.jobTemplate.spec"))
        return causes


_FIELDS = (("minute", 0, 59, {}), ("hour", 0, 23, {}), ("dom", 1, 31, {}),
           ("month", 1, 12, {m: i + 1 for i, m in enumerate(
               ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"))}),
           ("dow", 0, 6, {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}))
_DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")


def cron_error(schedule: str) -> str:
    """Why a standard 5-field cron schedule does not parse ("" when it does), in robfig/cron's words."""
    if "TZ=" in schedule:
        return "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
    if schedule.startswith("@"):
        if schedule in _DESCRIPTORS or schedule.startswith("@every "):
            return ""
        return f"unrecognized descriptor: {schedule}"
    fields = schedule.split()
    if len(fields) != 5:
        return f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]"
    for text, (_, low, high, names) in zip(fields, _FIELDS, strict=True):
        for part in text.split(","):
            error = _cron_range_error(part, low, high, names)
            if error:
                return error
    return ""


def _cron_range_error(expr: str, low: int, high: int, names: dict[str, int]) -> str:
    range_and_step = expr.split("/")
    if len(range_and_step) > 2:
        return f"too many slashes: {expr}"
    bounds = range_and_step[0].split("-")
    if len(bounds) > 2:
        return f"too many hyphens: {expr}"

    def number(text: str) -> tuple[int | None, str]:
        if text.lower() in names:
            return names[text.lower()], ""
        if not text.isdigit():
            return None, f"failed to parse int from {text}: strconv.Atoi: parsing {text!r}: invalid syntax".replace(
                "'", '"')
        return int(text), ""

    if bounds[0] in ("*", "?"):
        start, end = low, high
    else:
        start, error = number(bounds[0])
        if error:
            return error
        end = start
        if len(bounds) == 2:
            end, error = number(bounds[1])
            if error:
                return error
    if len(range_and_step) == 2:
        step, error = number(range_and_step[1])
        if error:
            return error
        if step == 0:
            return f"step of range should be a positive number: {expr}"
    assert start is not None and end is not None
    if start < low:
        return f"beginning of range ({start}) below minimum ({low}): {expr}"
    if end > high:
        return f"end of range ({end}) above maximum ({high}): {expr}"
    if start > end:
        return f"beginning of range ({start}) beyond end of range ({end}): {expr}"
    return ""
