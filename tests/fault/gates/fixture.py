"""The `gates` pytest fixture: a gates folder for the test, whose servers are
started with `gates.env`; at teardown every held caller is released and an
armed gate that was never reached fails the test."""

from __future__ import annotations

import pytest

from ratchet.libs.gates.control import GateNotReached, Gates


@pytest.fixture
def gates(tmp_path):
    g = Gates(tmp_path / "gates")
    yield g
    g.release_all()
    try:
        g.verify()
    except GateNotReached as e:
        pytest.fail(str(e), pytrace=False)
