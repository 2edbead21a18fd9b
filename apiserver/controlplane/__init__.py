"""Control-plane loops every apiserver runs on itself, as upstream's pkg/controlplane: the `kubernetes`
Service and the lease-based reconciler that lists every live apiserver in its Endpoints and EndpointSlice."""
