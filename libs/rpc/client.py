"""Client channels for the mesh: every call carries a deadline."""

from __future__ import annotations

import grpc

from ratchet.libs.rpc.server import MAX_MESSAGE_BYTES

CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.enable_retries", 0),
    # A restarted peer must be reachable again within ~2 s: the default
    # reconnect backoff grows to 120 s and kept callers answering UNAVAILABLE
    # long after the peer was back (found by the fault harness, kill_history).
    ("grpc.initial_reconnect_backoff_ms", 100),
    # gRPC core also takes this as the minimum connect timeout: at 100 ms a busy
    # peer (2 cores, a restart in progress) failed connects with "timed out before
    # receiving SETTINGS frame" (seen by the cron fault scenario). Attempts still
    # start 100 ms apart; each may take up to 2 s.
    ("grpc.min_reconnect_backoff_ms", 2000),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


def aio_channel(target: str) -> grpc.aio.Channel:
    """An insecure loopback channel (mTLS for the worker plane comes later)."""
    return grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)


def sync_channel(target: str) -> grpc.Channel:
    return grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
