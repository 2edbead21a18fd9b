"""The node agent: registers its Node, heartbeats, and runs the pods bound to it through CRI."""
