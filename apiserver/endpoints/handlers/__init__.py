"""What the front door dispatches to: resource verbs, watches, proxies and streams, discovery, query options."""
