"""Why migrations stay ours (libs/pg/migrate.py) rather than yoyo-migrations: on a real
Postgres yoyo 9.0.0 applies our four services' migrations to the same schema and is
idempotent (docs/benchmarks/findings.md, "Libraries we measured"), but it takes a folder our
rules refuse, and it cannot run on the driver the services use.

Each test asserts yoyo's measured behaviour AND ours. If one fails on yoyo's side, a newer
yoyo changed that behaviour: re-decide whether to adopt it (docs/architecture.md, "Not
yoyo") before updating the expected value.
"""

from __future__ import annotations

import importlib.metadata

import pytest
import yoyo
from yoyo.connections import BadConnectionURI

from ratchet.libs.pg.migrate import migration_files


def test_a_gap_in_the_numbers_passes_in_yoyo(tmp_path):
    # A lost 0002 (a bad merge) must stop start-up, not leave a shard without its change.
    for name in ("0001_tasks.sql", "0003_index.sql"):
        (tmp_path / name).write_text("SELECT 1;")
    assert [m.id for m in yoyo.read_migrations(str(tmp_path))] == ["0001_tasks", "0003_index"]
    with pytest.raises(ValueError, match=r"numbered 0001\.\. without gaps: \[1, 3\]"):
        migration_files(tmp_path)


def test_any_file_name_passes_in_yoyo(tmp_path):
    (tmp_path / "0001_tasks.sql").write_text("SELECT 1;")
    (tmp_path / "2-Add Index.sql").write_text("SELECT 1;")
    assert [m.id for m in yoyo.read_migrations(str(tmp_path))] == ["0001_tasks", "2-Add Index"]
    with pytest.raises(ValueError, match=r"must be named NNNN_snake_case\.sql"):
        migration_files(tmp_path)


def test_yoyo_has_no_asyncpg_backend():
    # Postgres through yoyo is psycopg2 or psycopg: a second, blocking driver in every service.
    names = {e.name for e in importlib.metadata.entry_points(group="yoyo.backends")}
    assert not any("asyncpg" in n for n in names)
    assert {"postgresql", "postgresql+psycopg"} <= names
    with pytest.raises(BadConnectionURI, match="postgresql\\+asyncpg"):
        yoyo.get_backend("postgresql+asyncpg://ratchet@127.0.0.1:1/x")
