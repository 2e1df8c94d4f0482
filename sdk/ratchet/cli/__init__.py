"""The `ratchet` command line: local platform, deploys, tenants and tasks."""
