"""Background loops of the dispatcher, one file per loop."""
