"""DefaultBinder: bind through the pods/binding subresource (409 if someone bound the pod first)."""

from scheduler.plugins.defaultbinder.default_binder import DefaultBinder

__all__ = ["DefaultBinder"]
