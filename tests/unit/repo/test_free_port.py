"""Listening ports for the local platform and tests come from below the ephemeral range,
where no outgoing connection can take them between the pick and the bind."""

import socket

from ratchet.libs.pg import cluster


def test_free_ports_are_below_the_ephemeral_range_and_bindable():
    low = cluster._ephemeral_low()
    ports = {cluster.free_port() for _ in range(50)}
    if low > cluster._LISTEN_PORTS[0] + 1000:
        assert all(cluster._LISTEN_PORTS[0] <= p < low for p in ports), sorted(ports)
    for p in list(ports)[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_taken_port_is_never_returned(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        monkeypatch.setattr(cluster, "_LISTEN_PORTS", (taken, taken + 1))
        monkeypatch.setattr(cluster, "_ephemeral_low", lambda: taken + 2)
        assert all(cluster.free_port() != taken for _ in range(20))
