"""The state machine is declared once (libs/taskstate) and everything else
is held to it: the diagram in docs/state-machine.md and the guards of every
state-changing SQL statement of the history service, which has no statement
or switch that runs without them."""

from __future__ import annotations

import importlib
import inspect
import pathlib
import pkgutil
import re

import pytest

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.libs import taskstate
from ratchet.libs.taskstate import ALLOWED, CREATE, TERMINAL, AttemptOutcome, IllegalTransition, TaskState
from ratchet.services import history
from ratchet.services.history.model import Transition
from ratchet.services.history.store import QUERIES, Store, Tx

ROOT = pathlib.Path(__file__).resolve().parents[3]
S = TaskState


def test_allowed_is_exactly_the_decided_machine():
    assert {
        (CREATE, S.ENQUEUED),
        (S.ENQUEUED, S.LEASED), (S.ENQUEUED, S.CANCELED), (S.ENQUEUED, S.EXPIRED),
        (S.LEASED, S.SUCCEEDED), (S.LEASED, S.RETRY_WAIT), (S.LEASED, S.FAILED), (S.LEASED, S.CANCELED),
        (S.RETRY_WAIT, S.ENQUEUED), (S.RETRY_WAIT, S.CANCELED), (S.RETRY_WAIT, S.EXPIRED),
        (S.LEASED, S.WAITING), (S.WAITING, S.ENQUEUED), (S.WAITING, S.CANCELED), (S.WAITING, S.EXPIRED),
    } == ALLOWED
    assert {S.SUCCEEDED, S.FAILED, S.CANCELED, S.EXPIRED} == TERMINAL


def test_terminal_states_have_no_way_out_and_nothing_returns_to_create():
    for state in TERMINAL:
        assert taskstate.successors(state) == frozenset()
    assert all(to is not None for _, to in ALLOWED)
    assert taskstate.successors(CREATE) == {S.ENQUEUED}


def test_check_accepts_allowed_and_rejects_everything_else():
    for frm in [CREATE, *S]:
        for to in S:
            if (frm, to) in ALLOWED:
                taskstate.check(frm, to)
                taskstate.check(frm.value if frm else None, to.value)
            else:
                with pytest.raises(IllegalTransition):
                    taskstate.check(frm, to)


def test_check_rejects_unknown_names():
    with pytest.raises(ValueError):
        taskstate.check("ENQUEUED", "RUNNING")


def test_proto_mapping_round_trips_and_matches_enum_names():
    for s in S:
        value = taskstate.to_proto(s)
        assert tasks_pb2.TaskState.Name(value) == f"TASK_STATE_{s.value}"
        assert taskstate.from_proto(value) is s
    with pytest.raises(ValueError):
        taskstate.from_proto(tasks_pb2.TASK_STATE_UNSPECIFIED)
    for o in AttemptOutcome:
        assert taskstate.outcome_from_proto(taskstate.outcome_to_proto(o)) is o
    assert len(AttemptOutcome) == len(tasks_pb2.AttemptOutcome.values()) - 1


def test_a_transition_value_cannot_be_built_for_an_illegal_edge():
    with pytest.raises(IllegalTransition):
        Transition(task_id="t", from_state=S.SUCCEEDED, to_state=S.ENQUEUED, lease_epoch=1, reason="x")
    with pytest.raises(IllegalTransition):
        Transition(task_id="t", from_state=S.ENQUEUED, to_state=S.SUCCEEDED, lease_epoch=1, reason="x")


# -- the diagram ------------------------------------------------------------------

def _diagram_edges() -> tuple[set, set]:
    text = (ROOT / "docs" / "state-machine.md").read_text()
    block = re.search(r"```mermaid\n(.*?)```", text, re.S)
    assert block, "docs/state-machine.md must hold a mermaid diagram"
    edges, ends = set(), set()
    for line in block.group(1).splitlines():
        m = re.match(r"\s*(\[\*\]|[A-Z_]+)\s*-->\s*(\[\*\]|[A-Z_]+)", line)
        if not m:
            continue
        frm, to = m.groups()
        if to == "[*]":
            ends.add(S(frm))
        else:
            edges.add((None if frm == "[*]" else S(frm), S(to)))
    return edges, ends


def test_diagram_edges_equal_allowed():
    edges, ends = _diagram_edges()
    assert edges == set(ALLOWED)
    assert ends == set(TERMINAL)


# -- the SQL guards ---------------------------------------------------------------

_EDGE = re.compile(r"(\(create\)|[A-Z_]+)\s*->\s*([A-Z_]+)")


def _annotated_edges(sql: str) -> set | None:
    m = re.search(r"^--\s*transitions:\s*(.+)$", sql, re.M)
    if not m:
        return None
    return {(None if a == "(create)" else S(a), S(b)) for a, b in _EDGE.findall(m.group(1))}


def _code(sql: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())


def _task_updates(sql: str) -> list[tuple[str, str]]:
    """(SET part, WHERE part) of every UPDATE tasks in a query."""
    out = []
    for m in re.finditer(r"UPDATE\s+tasks\b(.*?)(?=RETURNING|\)\s*,\s*\n\w+\s+AS\s*\(|\Z)", _code(sql), re.S):
        body = m.group(1)
        set_part, _, where_part = body.partition("WHERE")
        out.append((set_part, where_part))
    return out


def _sets_state(set_part: str) -> bool:
    return re.search(r"(?<![\w.])state\s*=", set_part) is not None


def _state_changing_queries():
    found = {}
    for name, sql in QUERIES.items():
        code = _code(sql)
        updates = [u for u in _task_updates(sql) if _sets_state(u[0])]
        inserts = re.search(r"INSERT\s+INTO\s+tasks\b", code) is not None
        if updates or inserts:
            found[name] = (sql, updates, inserts)
    return found


def test_every_state_changing_query_is_annotated_with_allowed_transitions():
    found = _state_changing_queries()
    assert {"task_create", "task_create_uniform", "task_lease_batch", "task_transition_apply"} <= set(found)
    for name, (sql, _, _) in found.items():
        edges = _annotated_edges(sql)
        assert edges, f"query {name} changes task state but has no '-- transitions:' comment"
        assert edges <= ALLOWED, f"query {name} declares transitions outside ALLOWED: {edges - ALLOWED}"
    for name, sql in QUERIES.items():
        if _annotated_edges(sql) is not None:
            assert name in found, f"query {name} is annotated with transitions but changes no state"


def test_every_state_update_guards_on_the_expected_states():
    for name, (sql, updates, inserts) in _state_changing_queries().items():
        edges = _annotated_edges(sql)
        if inserts:
            assert edges == {(CREATE, S.ENQUEUED)}, f"{name}: an insert may only create ENQUEUED tasks"
            assert "'ENQUEUED'" in _code(sql)
        for set_part, where_part in updates:
            sources = {frm for frm, _ in edges}
            targets = {to for _, to in edges}
            literal = set(re.findall(r"\bstate\s*=\s*'([A-Z_]+)'", where_part))
            param = re.search(r"\bstate\s*=\s*i\.from_state\b", where_part)
            assert literal or param, f"{name}: UPDATE tasks sets state without a state guard"
            if literal:
                assert {S(x) for x in literal} == sources, f"{name}: guard {literal} != declared sources {sources}"
            else:
                # Parameterised guard: every edge is checked by Transition (taskstate.check) before
                # it is sent, and the lease epoch must be part of the compare-and-set.
                assert CREATE not in sources
                assert re.search(r"\blease_epoch\s*=\s*i\.lease_epoch\b", where_part), name
            set_to = re.search(r"(?<![\w.])state\s*=\s*'([A-Z_]+)'", set_part)
            if set_to:
                assert {S(set_to.group(1))} == targets, f"{name}: sets {set_to.group(1)}, declares {targets}"
            else:
                assert re.search(r"(?<![\w.])state\s*=\s*i\.to_state\b", set_part), name


def _only_links_a_retry(set_part: str) -> bool:
    assignments = re.findall(r"(?<![\w.])(\w+)\s*=", set_part)
    return assignments == ["retried_as"]


def test_every_other_task_update_is_fenced_on_state_and_epoch():
    links = []
    for name, sql in QUERIES.items():
        for set_part, where_part in _task_updates(sql):
            if _sets_state(set_part):
                continue
            if _only_links_a_retry(set_part):
                # The bulk retry link is a compare-and-set on a terminal task's own column.
                links.append(name)
                assert re.search(r"\bretried_as IS NULL\b", where_part), f"{name}: retried_as set twice"
                assert "state IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'EXPIRED')" in where_part, name
                continue
            if re.findall(r"(?<![\w.])(\w+)\s*=", set_part) == ["parent_id"]:
                # A fan-out child's parent link, set once, in the transaction that created it.
                links.append(name)
                assert re.search(r"\bparent_id IS NULL\b", where_part), f"{name}: parent_id set twice"
                continue
            assert re.search(r"\bstate\s*=\s*'LEASED'", where_part), f"{name}: unguarded UPDATE tasks"
            assert re.search(r"\blease_epoch\s*=", where_part), f"{name}: UPDATE tasks without an epoch fence"
    assert sorted(links) == ["task_retry_batch", "workflow_children_link"]


# -- one path: the guarded one ----------------------------------------------------
# The fault checker's broken builds (one guard removed) are made by the fault tests from these
# statements and functions (tests/fault/mutants; tests/fault/unit/test_mutants.py): nothing in
# the shipped service can run without a guard.

_SWITCHES = {"fenced", "locked", "guards", "charge", "charged", "skip_retried", "unfenced", "unlocked"}


def _history_functions():
    for info in pkgutil.walk_packages(history.__path__, history.__name__ + "."):
        if info.name.endswith(".__main__"):  # (the entry point: grpc's settings must load before grpc)
            continue
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module):
            if getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isclass(obj):
                for name, fn in vars(obj).items():
                    if inspect.isfunction(fn):
                        yield f"{module.__name__}.{obj.__name__}.{name}", fn
            elif inspect.isfunction(obj):
                yield f"{module.__name__}.{obj.__name__}", obj


def test_the_shipped_store_holds_only_guarded_statements():
    assert Store.queries is QUERIES and Store().queries is QUERIES
    assert not [n for n in QUERIES if re.search(r"unfenced|unlocked|unguarded|test_only", n)]
    assert not [n for n, sql in QUERIES.items() if re.search(r"test-only|TEST-ONLY", sql)]
    # The guards the fault tests remove are in the statements the store runs.
    assert "t.lease_epoch = i.lease_epoch AND t.state = 'LEASED'" in QUERIES["task_complete_read"]
    assert "ON t.task_id = i.task_id AND t.lease_epoch = i.lease_epoch" in QUERIES["task_complete_lock"]
    assert _code(QUERIES["timer_claim_due"]).count("SKIP LOCKED") == 3
    assert "FROM due JOIN gone ON gone.task_id = due.task_id" in QUERIES["timer_claim_due"]
    assert "AND t.state = i.from_state AND t.lease_epoch = i.lease_epoch" in QUERIES["task_transition_apply"]
    assert "o.retried_as IS NULL" in QUERIES["task_retry_batch"]


def test_no_history_function_takes_a_guard_switch():
    found = list(_history_functions())
    assert len(found) > 100 and any(n.endswith("Tx.task_transition_apply") for n, _ in found)
    switches = {name: sorted(set(inspect.signature(fn).parameters) & _SWITCHES) for name, fn in found}
    assert {name: s for name, s in switches.items() if s} == {}
    # Each wrapper of a guarded statement runs that statement, and only it.
    for name in ("task_complete_read", "task_complete_lock", "task_transition_apply", "task_retry_batch",
                 "timer_claim_due"):
        assert re.findall(r'self\._run\("(\w+)"', inspect.getsource(getattr(Tx, name))) == [name], name
