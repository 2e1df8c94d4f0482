"""Peers measured beside Ratchet in the same run (issue 5): each is an optional
extra (`pip install -e '.[bench]'`; graphile-worker via npm) and is skipped with
a message naming what is missing. Order here is the round-1 order."""

from __future__ import annotations

PEER_MODULES = {
    "procrastinate": ("loadtest.peers.procrastinate_peer", "ProcrastinatePeer"),
    "dbos": ("loadtest.peers.dbos_peer", "DbosPeer"),
    "graphile-worker": ("loadtest.peers.graphile_peer", "GraphilePeer"),
    "celery": ("loadtest.peers.celery_peer", "CeleryPeer"),
    "temporal": ("loadtest.peers.temporal_peer", "TemporalPeer"),
}


def load(name: str):
    """The peer class, or raise PeerUnavailable/ImportError with the reason."""
    import importlib
    module, cls = PEER_MODULES[name]
    peer_cls = getattr(importlib.import_module(module), cls)
    peer_cls.check()
    return peer_cls
