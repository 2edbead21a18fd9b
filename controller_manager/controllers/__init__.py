"""One module per controller; each exposes NAME and new(ctx) (see controller_manager.registry)."""
