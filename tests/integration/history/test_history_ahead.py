"""StepResponse.ahead on history's real shards: a BEGIN answered DONE at a logged position also
returns the completed entries right after it (STEP, VERSION, SLEEP, WAIT, ON_CANCEL), in order
and without a gap, at most 500 of them and 1 MiB of results, read in the same transaction; the
first entry of another kind or state ends the page. And what it costs a BEGIN (an A/B)."""

from __future__ import annotations

import json
import statistics
import time

import asyncpg

from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.services.history.policy import duration
from ratchet.services.history.store import Store, Tx
from ratchet.services.history.workflows import steps
from ratchet.services.history.workflows.convert import StepOp

from .test_history_workflows import _run, _step, _steps

DONE = wpb.STEP_STATUS_DONE


def _page(r: wpb.StepResponse) -> list[tuple]:
    return [(e.position, e.name, wpb.StepKind.Name(e.kind).removeprefix("STEP_KIND_"), e.attempt, e.result_json)
            for e in r.ahead]


async def _log(hist, task_id: str, n: int, *, start: int = 0, result: str = "'1'") -> None:
    """n COMPLETED STEP rows from position start, straight into the log (a long replayed run)."""
    await hist.sql(1, f"""INSERT INTO workflow_steps (workflow_id, position, name, kind, state, lease_epoch, attempt,
                                                   result, started_at, finished_at)
                         SELECT $1::uuid, p, 's' || p, 'STEP', 'COMPLETED', 1, 1, convert_to({result}, 'UTF8'),
                                now(), now()
                           FROM generate_series($2::int, $2::int + $3::int - 1) AS p""", task_id, start, n)


async def test_a_done_begin_pages_the_completed_entries_after_it_and_stops_at_an_open_one(hist):
    _, _, leased = await _run(hist)
    for pos, name in ((0, "a"), (4, "e")):
        if pos == 4:
            assert (await _step(hist, leased, "BEGIN", 3, "undo", "ON_CANCEL", result_json=b"[3]")).status == DONE
        await _step(hist, leased, "BEGIN", pos, name)
        await _step(hist, leased, "COMMIT", pos, name, result_json=json.dumps({"p": pos}).encode())
        if pos == 0:
            assert (await _step(hist, leased, "BEGIN", 1, "v", "VERSION", version=2)).status == DONE
            assert (await _step(hist, leased, "BEGIN", 2, "nap", "SLEEP", duration=duration(0))).status == DONE
    await _step(hist, leased, "BEGIN", 5, "open")  # a claim still RUNNING: the page stops before it
    r = await _step(hist, leased, "BEGIN", 0, "a")
    assert r.status == DONE and json.loads(r.result_json) == {"p": 0}
    assert _page(r) == [(1, "v", "VERSION", 1, b"2"), (2, "nap", "SLEEP", 1, b""), (3, "undo", "ON_CANCEL", 1, b"[3]"),
                        (4, "e", "STEP", 1, b'{"p": 4}')]
    assert _page(await _step(hist, leased, "BEGIN", 2, "nap", "SLEEP", duration=duration(0)))[0][0] == 3
    assert _page(await _step(hist, leased, "BEGIN", 4, "e")) == []  # the next entry is open
    assert list((await _step(hist, leased, "BEGIN", 5, "open")).ahead) == []  # RUN: no page
    new = await _step(hist, leased, "BEGIN", 6, "v2", "VERSION", version=1)  # a new entry: nothing after it
    assert new.status == DONE and list(new.ahead) == []


async def test_the_page_stops_at_a_failure_a_fanout_or_a_running_wait(hist):
    _, _, leased = await _run(hist)
    await _log(hist, leased.task_id, 2)
    await hist.sql(1, """INSERT INTO workflow_steps (workflow_id, position, name, kind, state, lease_epoch, attempt,
                                                   error_class, fatal, started_at, finished_at)
                         VALUES ($1::uuid, 2, 'bad', 'STEP', 'FAILED', 1, 1, 'E', true, now(), now())""",
                   leased.task_id)
    await _log(hist, leased.task_id, 2, start=3)
    await hist.sql(1, """INSERT INTO workflow_steps (workflow_id, position, name, kind, state, lease_epoch, attempt,
                                                   child_count, on_failure, started_at, finished_at)
                         VALUES ($1::uuid, 5, 'fan', 'PARALLEL', 'COMPLETED', 1, 1, 2, 'COLLECT', now(), now())""",
                   leased.task_id)
    await _log(hist, leased.task_id, 1, start=6)
    await hist.sql(1, """INSERT INTO workflow_steps (workflow_id, position, name, kind, state, lease_epoch, attempt,
                                                   started_at)
                         VALUES ($1::uuid, 7, 'w', 'WAIT', 'RUNNING', 1, 1, now())""",
                   leased.task_id)
    assert [e[0] for e in _page(await _step(hist, leased, "BEGIN", 0, "s0"))] == [1]  # stops at the failure
    failed = await _step(hist, leased, "BEGIN", 2, "bad")
    assert failed.status == DONE and failed.error.error_class == "E" and [e[0] for e in _page(failed)] == [3, 4]
    assert [e[0] for e in _page(await _step(hist, leased, "BEGIN", 4, "s4"))] == []  # a fan-out next
    assert [e[0] for e in _page(await _step(hist, leased, "BEGIN", 5, "fan", "PARALLEL",
                                            children=[wpb.ChildSpec(task_type="w", payload_json=b"1")] * 2))] == [6]
    assert _page(await _step(hist, leased, "BEGIN", 6, "s6")) == []  # a running wait next


async def test_the_page_holds_at_most_500_entries_and_1_mib_of_results(hist):
    _, _, leased = await _run(hist)
    await _log(hist, leased.task_id, 700)
    page = _page(await _step(hist, leased, "BEGIN", 0, "s0"))
    assert [e[0] for e in page] == list(range(1, 501)) and page[0] == (1, "s1", "STEP", 1, b"1")
    assert [e[0] for e in _page(await _step(hist, leased, "BEGIN", 650, "s650"))] == list(range(651, 700))
    _, _, big = await _run(hist)
    chunk = 250 * 1024  # four fit in 1 MiB (1,024,000 bytes), a fifth does not
    await _log(hist, big.task_id, 8, result=f"'\"' || repeat('x', {chunk - 2}) || '\"'")
    page = _page(await _step(hist, big, "BEGIN", 0, "s0"))
    assert [e[0] for e in page] == [1, 2, 3, 4] and all(len(e[4]) == chunk for e in page)
    assert len(await _steps(hist, big.task_id)) == 8  # read only


async def test_a_begins_cost_with_and_without_the_page_a_b(hist, monkeypatch):
    """Interleaved A/B (ABBA) of one BEGIN answered DONE, the whole op (its transaction: lease
    fence, row lock, and in B the page read) on a 10,000-step log: at position 0 (B reads a full
    page of 500) and at 9,999 (nothing after it). A skips the page's statement."""
    _, _, leased = await _run(hist)
    await _log(hist, leased.task_id, 10_000)
    store = Store()
    real = Tx.workflow_steps_ahead

    async def none(self, *a):
        return []

    conn = await asyncpg.connect(hist.dsns[1])
    figures = {}
    try:
        for pos in (0, 9_999):
            op = StepOp(shard_id=1, task_id=leased.task_id, lease_epoch=leased.lease_epoch, op="BEGIN",
                        position=pos, name=f"s{pos}", kind="STEP")
            times: dict[str, list[float]] = {"A": [], "B": []}
            for i in range(240):
                arm = "ABBA"[i % 4]
                monkeypatch.setattr(Tx, "workflow_steps_ahead", none if arm == "A" else real)
                t0 = time.perf_counter()
                answer = await steps.run_step(conn, store, op)
                times[arm].append(time.perf_counter() - t0)
                assert answer.status == "DONE" and len(answer.ahead) == (0 if arm == "A" or pos else 500)
            figures[pos] = {k: (statistics.mean(v[20:]) * 1e3, statistics.median(v[20:]) * 1e3)
                            for k, v in times.items()}
    finally:
        monkeypatch.setattr(Tx, "workflow_steps_ahead", real)
        await conn.close()
    print("BEGIN ms (mean, median) by position:", figures)
    a0, b0 = figures[0]["A"][0], figures[0]["B"][0]
    a1, b1 = figures[9_999]["A"][0], figures[9_999]["B"][0]
    assert b1 <= 1.5 * a1 + 0.5, figures  # nothing ahead: one index probe more
    assert b0 <= a0 + 20.0, figures  # a full page: 500 rows read and sent, for 500 round trips saved
