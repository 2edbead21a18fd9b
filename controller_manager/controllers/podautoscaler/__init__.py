"""The horizontal-pod-autoscaling controller: HorizontalPodAutoscalers (autoscaling/v2) scale any
resource with a scale subresource by its pods' resource metrics, with upstream's flags."""

from __future__ import annotations

import argparse

from controller_manager.context import ControllerContext
from controller_manager.controllers.podautoscaler.controller import HorizontalController
from services.runtime.durations import duration_flag

NAME = "horizontalpodautoscaling"


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--horizontal-pod-autoscaler-sync-period", type=duration_flag, default=15.0,
                        help="how often each HPA is reconciled (default 15s)")
    parser.add_argument("--horizontal-pod-autoscaler-downscale-stabilization", type=duration_flag, default=300.0,
                        help="how far back scale-down recommendations are looked at (default 5m0s)")
    parser.add_argument("--horizontal-pod-autoscaler-tolerance", type=float, default=0.1,
                        help="the usage ratio within which no scaling happens (default 0.1)")
    parser.add_argument("--horizontal-pod-autoscaler-cpu-initialization-period", type=duration_flag, default=300.0,
                        help="how long after a pod starts its CPU samples may be skipped (default 5m0s)")
    parser.add_argument("--horizontal-pod-autoscaler-initial-readiness-delay", type=duration_flag, default=30.0,
                        help="how long after a pod starts a readiness change counts as its first (default 30s)")
    parser.add_argument("--concurrent-horizontal-pod-autoscaler-syncs", type=int, default=5)


def new(ctx: ControllerContext) -> HorizontalController:
    return HorizontalController(ctx)
