"""Audit logging: upstream's audit.k8s.io/v1 Policy decides what each request records, Events go to a log."""
