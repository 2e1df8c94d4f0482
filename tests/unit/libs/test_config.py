"""libs/config: a JSON file, then <PREFIX><FIELD> variables, then overrides; every refusal
names the field (pydantic-settings was measured against these: docs/benchmarks/findings.md)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ratchet.libs.config import ConfigError, describe, field, load_config


@dataclasses.dataclass(frozen=True)
class Demo:
    dsn: str = field(doc="where the database is (required)")
    batch_size: int = field(100, doc="rows per call")
    interval_s: float = field(0.5, doc="seconds between looks")
    verbose: bool = field(False, doc="log more")
    shard_ids: list[int] = field(default_factory=lambda: [0], doc="shards")


def _file(tmp_path, **data):
    path = tmp_path / "demo.json"
    path.write_text(json.dumps(data))
    return path


def test_the_file_then_the_environment_then_overrides(tmp_path, monkeypatch):
    monkeypatch.setenv("DEMO_BATCH_SIZE", "7")
    monkeypatch.setenv("DEMO_SHARD_IDS", "[1, 2]")
    monkeypatch.setenv("DEMO_VERBOSE", "yes")
    c = load_config(Demo, _file(tmp_path, dsn="db", batch_size=5, interval_s=2), env_prefix="DEMO_",
                    overrides={"interval_s": 1})
    assert c == Demo(dsn="db", batch_size=7, interval_s=1.0, verbose=True, shard_ids=[1, 2])


@pytest.mark.parametrize("data, message", [
    (dict(dsn="db", batch_sise=5), r"unknown config field\(s\) \['batch_sise'\] for Demo"),
    (dict(dsn="db", batch_size=2.5), "config field 'batch_size' must be an integer, got 2.5"),
    (dict(dsn="db", batch_size="ten"), "config field 'batch_size' must be an integer, got 'ten'"),
    (dict(dsn="db", batch_size=True), "config field 'batch_size' must be an integer, got True"),
    (dict(dsn="db", interval_s="soon"), "config field 'interval_s' must be a number, got 'soon'"),
    (dict(dsn="db", verbose=1), "config field 'verbose' must be a boolean, got 1"),
    (dict(dsn="db", shard_ids="[1"), "config field 'shard_ids' must be JSON"),
    (dict(dsn=5), "config field 'dsn' must be a string, got 5"),
    (dict(batch_size=5), r"config field\(s\) \['dsn'\] of Demo required"),
])
def test_refusals_name_the_field(tmp_path, data, message):
    with pytest.raises(ConfigError, match=message):
        load_config(Demo, _file(tmp_path, **data))


def test_a_whole_float_is_an_integer(tmp_path):
    assert load_config(Demo, _file(tmp_path, dsn="db", batch_size=7.0)).batch_size == 7


def test_describe_lists_each_field_with_its_default_and_doc():
    lines = describe(Demo).splitlines()
    assert lines[0] == "  dsn = '(required)': where the database is (required)"
    assert lines[1] == "  batch_size = 100: rows per call"
    assert len(lines) == 5


def test_list_and_dict_elements_are_checked_and_the_bad_one_named():
    import dataclasses as dc

    from ratchet.libs.config import ConfigError, field, load_config

    @dc.dataclass(frozen=True)
    class C:
        ids: list[int] = field(default_factory=list, doc="ids")
        dsns: dict[str, str] = field(default_factory=dict, doc="dsns")

    assert load_config(C, overrides={"ids": [1, "2"], "dsns": {"1": "postgres://x"}}) == C([1, 2], {"1": "postgres://x"})
    with pytest.raises(ConfigError, match=r"'ids\[1\]' must be an integer, got 'two'"):
        load_config(C, overrides={"ids": [1, "two"]})
    with pytest.raises(ConfigError, match=r"'dsns\.1' must be a string, got 5"):
        load_config(C, overrides={"dsns": {"1": 5}})
