"""Fixtures for the local-platform tests: a state folder Postgres may enter."""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile

import pytest

from ratchet.cli.platform import SERVICES

REPO = pathlib.Path(__file__).resolve().parents[3]
FAKE = "tests.integration.cli.fake_service"


@pytest.fixture
def state_dir():
    """A fresh state folder. Not pytest's tmp_path: Postgres runs as an
    unprivileged user when we are root and must be able to reach it."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="ratchet-cli-"))
    os.chmod(root, 0o755)
    yield root / "state"
    shutil.rmtree(root, ignore_errors=True)


def fake_options(**overrides) -> dict:
    """LocalPlatform options that run the fake service in place of every real one."""
    return {"service_modules": dict.fromkeys(SERVICES, FAKE), "env": {"PYTHONPATH": str(REPO)},
            "pg_settings": {"fsync": "off", "synchronous_commit": "off"}, "overrides": overrides}
