"""The fault harness: a recorded workload, a seeded nemesis, a platform with
fault hooks (proxies, per-service clock skew), the final shard dump, and the
scenario runner that ties them to the checker."""
