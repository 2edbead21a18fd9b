"""The Job controller: `controller` runs a Job's pods and writes its status; `policy` holds the pure
rules it applies (podFailurePolicy, successPolicy, indexes, when a job is finished)."""

from controller_manager.controllers.job.controller import NAME, new

__all__ = ["NAME", "new"]
