"""The network-policy agent: enforces `networking.k8s.io/v1` NetworkPolicies for one node's pods."""
