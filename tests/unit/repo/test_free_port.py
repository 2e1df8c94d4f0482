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


def test_ports_already_handed_out_are_not_drawn_again(monkeypatch):
    """A platform picks every service's port before any of them binds: the same free port
    drawn twice made one service fail to bind (a fault-harness flake)."""
    monkeypatch.setattr(cluster, "_LISTEN_PORTS", (24000, 24002))
    monkeypatch.setattr(cluster, "_ephemeral_low", lambda: 40000)
    handed = set()
    for _ in range(3):
        handed.add(cluster.free_port(handed))
    assert handed == {24000, 24001, 24002}
    # The range is used up: a kernel-chosen port, still not one handed out.
    assert cluster.free_port(handed) not in handed


def test_the_local_platform_never_gives_two_services_one_port(tmp_path, monkeypatch):
    from ratchet.cli.platform import SERVICES, LocalPlatform
    monkeypatch.setattr(cluster, "_LISTEN_PORTS", (24100, 24100 + len(SERVICES)))
    monkeypatch.setattr(cluster, "_ephemeral_low", lambda: 40000)
    p = LocalPlatform(tmp_path)
    p._choose_ports()
    ports = list(p.ports.values())
    assert len(ports) == len(set(ports)) == len(SERVICES) + 1, p.ports
