"""The kubelet's own client certificate: TLS bootstrap with a bootstrap token, and rotation before expiry."""
