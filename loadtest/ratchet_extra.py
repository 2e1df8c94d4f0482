"""Ratchet's issue-5 cells (placeholder, filled below)."""


async def ratchet_round(run, r):
    raise NotImplementedError


async def shard_sweep(run):
    return None
