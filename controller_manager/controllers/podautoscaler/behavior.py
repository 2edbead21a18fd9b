"""From a raw recommendation to the replica count the HPA sets: upstream's stabilization windows
(recent recommendations bound the next one) and scaling policies (how fast it may move within a
period), or without `behavior` the fixed rules (at most double, at least 4, per step)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

Obj = dict[str, Any]
SCALE_UP_LIMIT_FACTOR, SCALE_UP_LIMIT_MINIMUM = 2.0, 4.0


@dataclass(frozen=True)
class Recommendation:
    at: datetime
    replicas: int


@dataclass(frozen=True)
class ScaleEvent:
    at: datetime
    change: int


@dataclass
class History:
    """What one HPA's past syncs recommended and did, kept in memory as upstream's controller keeps it."""

    recommendations: list[Recommendation] = field(default_factory=list)
    scale_up: list[ScaleEvent] = field(default_factory=list)
    scale_down: list[ScaleEvent] = field(default_factory=list)

    def record_scale(self, now: datetime, change: int, longest_period: timedelta) -> None:
        events = self.scale_up if change > 0 else self.scale_down
        events[:] = [e for e in events if now - e.at <= longest_period]
        events.append(ScaleEvent(now, abs(change)))


@dataclass(frozen=True)
class Decision:
    replicas: int
    #: the AbleToScale reason and message of the stabilization step
    stabilized_reason: str
    stabilized_message: str
    #: the ScalingLimited condition: status, reason, message
    limited: bool
    limit_reason: str
    limit_message: str


def _changed_within(events: list[ScaleEvent], period: timedelta, now: datetime) -> int:
    return sum(e.change for e in events if now - e.at <= period)


def _scale_up_limit(current: int, history: History, rules: Obj, now: datetime) -> int:
    policy_choice = rules.get("selectPolicy") or "Max"
    if policy_choice == "Disabled":
        return current
    proposals = []
    for policy in rules.get("policies") or ():
        period = timedelta(seconds=int(policy.get("periodSeconds") or 0))
        start = current - _changed_within(history.scale_up, period, now) + _changed_within(
            history.scale_down, period, now)
        value = int(policy.get("value") or 0)
        proposals.append(start + value if policy.get("type") == "Pods" else math.ceil(start * (1 + value / 100)))
    if not proposals:
        return current
    return min(proposals) if policy_choice == "Min" else max(proposals)


def _scale_down_limit(current: int, history: History, rules: Obj, now: datetime) -> int:
    policy_choice = rules.get("selectPolicy") or "Max"
    if policy_choice == "Disabled":
        return current
    proposals = []
    for policy in rules.get("policies") or ():
        period = timedelta(seconds=int(policy.get("periodSeconds") or 0))
        start = current - _changed_within(history.scale_up, period, now) + _changed_within(
            history.scale_down, period, now)
        value = int(policy.get("value") or 0)
        proposals.append(start - value if policy.get("type") == "Pods" else int(start * (1 - value / 100)))
    if not proposals:
        return current
    # Min picks the policy that allows the smallest change, which on the way down is the highest count.
    return max(proposals) if policy_choice == "Min" else min(proposals)


def _stabilize(history: History, current: int, desired: int, up_window: timedelta, down_window: timedelta,
               now: datetime) -> int:
    up, down = desired, desired
    for rec in history.recommendations:
        if rec.at > now - up_window:
            up = min(up, rec.replicas)
        if rec.at > now - down_window:
            down = max(down, rec.replicas)
    longest = max(up_window, down_window)
    history.recommendations[:] = [r for r in history.recommendations if r.at > now - longest]
    history.recommendations.append(Recommendation(now, desired))
    recommendation = max(current, up)
    return min(recommendation, down)


def with_behavior(history: History, behavior: Obj, current: int, desired: int, low: int, high: int,
                  default_down_window: timedelta, now: datetime) -> Decision:
    """Upstream's normalizeDesiredReplicasWithBehaviors."""
    up_rules, down_rules = behavior.get("scaleUp") or {}, behavior.get("scaleDown") or {}
    up_window = timedelta(seconds=int(up_rules.get("stabilizationWindowSeconds") or 0))
    down_seconds = down_rules.get("stabilizationWindowSeconds")
    down_window = default_down_window if down_seconds is None else timedelta(seconds=int(down_seconds))
    stabilized = _stabilize(history, current, desired, up_window, down_window, now)
    if stabilized == desired:
        reason, message = "ReadyForNewScale", "recommended size matches current size"
    elif stabilized > desired:
        reason = "ScaleDownStabilized"
        message = "recent recommendations were higher than current one, applying the highest recent recommendation"
    else:
        reason = "ScaleUpStabilized"
        message = "recent recommendations were lower than current one, applying the lowest recent recommendation"
    final, limit_reason, limit_message = stabilized, "DesiredWithinRange", "the desired count is within the " \
                                                                             "acceptable range"
    if stabilized > current:
        limit = max(_scale_up_limit(current, history, up_rules, now), current)
        allowed = high
        why = ("TooManyReplicas", "the desired replica count is more than the maximum replica count")
        if allowed > limit:
            allowed = limit
            why = ("ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate")
        if stabilized > allowed:
            final, (limit_reason, limit_message) = allowed, why
    elif stabilized < current:
        limit = min(_scale_down_limit(current, history, down_rules, now), current)
        allowed = low
        why = ("TooFewReplicas", "the desired replica count is less than the minimum replica count")
        if allowed < limit:
            allowed = limit
            why = ("ScaleDownLimit", "the desired replica count is decreasing faster than the maximum scale rate")
        if stabilized < allowed:
            final, (limit_reason, limit_message) = allowed, why
    return Decision(final, reason, message, final != stabilized, limit_reason, limit_message)


def without_behavior(history: History, current: int, desired: int, low: int, high: int,
                     down_window: timedelta, now: datetime) -> Decision:
    """Upstream's normalizeDesiredReplicas: the downscale stabilization window of the flag, then at most
    double (at least 4) per step, within min and max."""
    highest = desired
    for rec in history.recommendations:
        if rec.at > now - down_window:
            highest = max(highest, rec.replicas)
    history.recommendations[:] = [r for r in history.recommendations if r.at > now - down_window]
    history.recommendations.append(Recommendation(now, desired))
    stabilized = highest
    if stabilized == desired:
        reason, message = "ReadyForNewScale", "recommended size matches current size"
    else:
        reason = "ScaleDownStabilized"
        message = "recent recommendations were higher than current one, applying the highest recent recommendation"
    up_limit = int(max(SCALE_UP_LIMIT_FACTOR * current, SCALE_UP_LIMIT_MINIMUM))
    if up_limit < high:
        maximum = up_limit
        too_many = ("ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate")
    else:
        maximum = high
        too_many = ("TooManyReplicas", "the desired replica count is more than the maximum replica count")
    minimum = max(low, 1)
    too_few = ("TooFewReplicas", "the desired replica count is less than the minimum replica count") if low else (
        "TooFewReplicas", "the desired replica count is zero")
    final, (limit_reason, limit_message) = stabilized, ("DesiredWithinRange",
                                                        "the desired count is within the acceptable range")
    if stabilized < minimum:
        final, (limit_reason, limit_message) = minimum, too_few
    elif stabilized > maximum:
        final, (limit_reason, limit_message) = maximum, too_many
    return Decision(final, reason, message, final != stabilized, limit_reason, limit_message)


def longest_policy_period(behavior: Obj | None) -> timedelta:
    """How long scale events matter: the longest policy period (upstream keeps them that long)."""
    periods = [int(p.get("periodSeconds") or 0) for rules in ((behavior or {}).get("scaleUp") or {},
                                                              (behavior or {}).get("scaleDown") or {})
               for p in rules.get("policies") or ()]
    return timedelta(seconds=max(periods, default=0))
