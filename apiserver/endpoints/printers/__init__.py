"""Table output: the printer columns of every built-in resource."""
