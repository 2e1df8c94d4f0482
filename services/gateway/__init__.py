"""The gateway: Ratchet's public API (gRPC and REST translated from the same
protos), authentication, validation at the edge, idempotency routing to
shards, and the control database (tenants, apps, API keys, deployments)."""
