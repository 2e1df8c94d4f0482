"""The in-sandbox stub: loads an app version and runs its handlers for the
host agent (`python -m ratchet.sandbox run`), or describes them for deploy
(`python -m ratchet.sandbox describe`). It holds no credentials."""
