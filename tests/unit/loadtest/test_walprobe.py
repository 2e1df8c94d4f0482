"""The WAL probe's bookkeeping: relation names, per-task tables, before/after comparison."""

import json

from loadtest import walprobe


def _phase(name: str, rnd: str, tasks: int, groups: list[dict]) -> walprobe.Phase:
    return walprobe.Phase(name=name, round=rnd, tasks=tasks, wal_lsn_bytes=sum(g["bytes"] for g in groups) + 10,
                          groups=groups, commits=tasks, write_xacts=tasks)


def _g(rel: str, nbytes: int, fpi: int = 0, rmgr: str = "Heap", rtype: str = "INSERT", n: int = 1) -> dict:
    return {"rmgr": rmgr, "record_type": rtype, "relation": rel, "records": n, "bytes": nbytes,
            "fpi_bytes": fpi, "fpi_records": 1 if fpi else 0}


def test_labels_fold_shards_and_catalogs():
    names = walprobe.Names(pg=None, shard_dbs=["ratchet_shard_0", "ratchet_shard_1"])
    names.db_names = {1: "ratchet_shard_0", 2: "ratchet_shard_1", 3: "phys"}
    names.rels = {1: {10: "tasks", 11: "pg_class"}, 2: {20: "tasks"}, 3: {30: "phys_jobs"}}
    assert names.label("Heap", 1, 10, "main") == names.label("Heap", 2, 20, "main") == "tasks"
    assert names.label("Heap", 1, 10, "vm") == "tasks [vm]"
    assert names.label("Heap", 3, 30, "main") == "phys: phys_jobs"
    assert names.label("Heap2", 1, 11, "main").startswith("(system catalogs")
    assert names.label("Transaction", None, None, None) == "(transaction: commit records)"


def test_tables_are_per_task_and_split_fpi(tmp_path):
    drain = _phase("drain", "cold", 10, [_g("tasks", 9000, fpi=4000, rtype="UPDATE", n=20),
                                         _g("tasks", 1000, rtype="LOCK", n=20), _g("timers", 500)])
    keyed = _phase("enqueue_keyed", "cold", 10, [_g("tasks", 5000, n=10)])
    ref = _phase("PHYS_job (8 clients)", "cold", 100, [_g("phys: phys_jobs", 75000, n=300)])
    text = walprobe.render([ref, keyed, drain])
    assert "| tasks | 1,000 | 400 | 600 | 4.00 |" in text  # 10,000 B over 10 tasks, 4,000 of it FPI
    assert "| cold | 750 | 500 | – | 1,050 | 1,550 | 2.07 × |" in text
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"phases": [p.to_json() for p in (ref, keyed, drain)]}))
    after = _phase("drain", "cold", 10, [_g("tasks", 3000, rtype="UPDATE", n=20)])
    diff = walprobe.compare(walprobe.load(path), [ref, keyed, after])
    assert "**cold · drain**: 1,050 → 300 B/task" in diff
    assert "| timers | 50 | – | 50 | – |" in diff
