"""Background loops of the host agent, one per file: poll, heartbeat, completions."""
