"""Pod workers and what they need: status, probes, volumes, environment, hooks and back-off."""
