"""History with exactly one guard removed: the broken builds the fault checker must catch.

The shipped history has one path, the guarded one: no switch, no unfenced statement. A
mutant is built here, at start-up, from the shipped code: a statement of
services/history/store/*.sql or a function of services/history with its guard's text cut
out. Each cut must match the shipped text exactly as often as it says, or building the
mutant fails (MutationError), so a change to the guarded code cannot leave a mutation
silently testing nothing. tests/fault/unit/test_mutants.py proves every mutant differs from
the shipped code by its cuts alone.

Where the mutant runs:
* `python -m tests.fault.mutants.history --mutation NAME --config FILE`: history's own main
  with the mutation installed (the fault harness starts it: FaultPlatform(mutation=NAME));
* in-process, `with installed(NAME): HistoryServer(cfg)` (the integration tests).

What a mutation changes:
* SqlCut: the statement the mutant's Store runs under that name (MutantStore.queries); the
  shipped registry (QUERIES) is untouched. A guard that is a parameter's only use leaves a
  tautology on that parameter in its place (`keep`), so the statement binds the same
  arguments. `within` confines the cut statement to the calls made while one function runs
  (a timer firing's transitions, not the completions').
* PyCut: a function recompiled from its shipped source without the guard, seen only by one
  caller: the caller is the shipped code object itself, bound to globals in which the
  function's name means the cut copy (and a module-level dispatch table holding the
  function, such as history's `_BEGIN` of step kinds, is a copy holding the cut one).
"""

from __future__ import annotations
import __future__

import contextlib
import contextvars
import dataclasses
import functools
import importlib
import inspect
import re
import textwrap
import types
from collections.abc import Callable, Iterator, Mapping

from ratchet.services.history.store import QUERIES, Store

ENV = "RATCHET_FAULT_MUTATION"  # the mutation of a mutant history started without --mutation


class MutationError(RuntimeError):
    """A mutation no longer matches the shipped code: update the mutation with the code."""


@dataclasses.dataclass(frozen=True)
class SqlCut:
    """Cut `text` out of the shipped statement `query`, where it occurs exactly `times` times."""

    query: str
    text: str
    times: int = 1
    within: str | None = None  # "module:function" (async): the cut statement runs only inside its calls
    # What stands in the guard's place: nothing, or, when the guard holds the statement's only use of
    # a parameter, a tautology on it (`$3::bigint IS NOT NULL`), so the statement still binds every
    # argument its caller passes (Postgres refuses a statement with an unused $n before a later one).
    keep: str = ""


@dataclasses.dataclass(frozen=True)
class PyCut:
    """Cut `text` out of the source of `function` ("module:function"), where it occurs exactly
    `times` times; the cut copy replaces the function for `caller` ("module:function") alone."""

    function: str
    text: str
    caller: str
    times: int = 1


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str  # the guard it removes
    doc: str  # what goes wrong without it, and which cut does it
    sql: tuple[SqlCut, ...] = ()
    py: tuple[PyCut, ...] = ()


_TRANSITION_CAS = ("\n       AND t.state = i.from_state AND t.lease_epoch = i.lease_epoch"
                   " AND t.version = COALESCE(lease.version, t.version)")
_FIRE_TIMERS = "ratchet.services.history.timers.firing:fire_timers"
_STEPS = "ratchet.services.history.workflows.steps"

MUTATIONS: dict[str, Mutation] = {m.name: m for m in (
    Mutation(
        "epoch_check_on_complete",
        "A completion is matched to its task without its lease epoch (the read that decides it and "
        "the lock a raced one is decided again under), so a completion of an earlier, expired "
        "lease is accepted while a later lease runs.",
        sql=(SqlCut("task_complete_read", "t.lease_epoch = i.lease_epoch AND "),
             SqlCut("task_complete_lock", " AND t.lease_epoch = i.lease_epoch"))),
    Mutation(
        "charge_attempt_at_lease",
        "An attempt that ends without a report (its lease expired, or it was revoked after a "
        "timeout's grace) is not counted against max_attempts: the lease timer's end of an "
        "attempt skips the exhaustion check, so a task that kills its worker retries forever. "
        "(Attempts that report still count.)",
        py=(PyCut("ratchet.services.history.decide:end_attempt",
                  "    if task.attempt >= max_attempts:\n"
                  "        return Transition(to_state=TaskState.FAILED, error=err,\n"
                  "                          reason=f\"attempts exhausted ({task.attempt}/{max_attempts})\", **base)\n",
                  caller="ratchet.services.history.decide:_fire_lease"),)),
    Mutation(
        "timer_skip_locked",
        "The timer loop claims due timers and lease checks without locking them or their tasks (no "
        "FOR UPDATE ... SKIP LOCKED), fires the due timers it read whether or not its own delete "
        "took them (no join on the deleted rows), and applies its transitions without the "
        "compare-and-set on (state, lease_epoch, version), so two firers fire one timer twice.",
        sql=(SqlCut("timer_claim_due", "\n       FOR UPDATE OF m SKIP LOCKED"),
             SqlCut("timer_claim_due", "\n       FOR NO KEY UPDATE OF t SKIP LOCKED", times=2),
             SqlCut("timer_claim_due", " JOIN gone ON gone.task_id = due.task_id AND gone.kind = due.kind"),
             SqlCut("task_transition_apply", _TRANSITION_CAS, within=_FIRE_TIMERS))),
    Mutation(
        "retry_link_once",
        "A bulk retry neither skips originals already retried nor links them as a compare-and-set "
        "(retried_as IS NULL), so re-running a retry makes a second new task per dead letter.",
        sql=(SqlCut("task_retry_batch", " AND o.retried_as IS NULL"),),
        py=(PyCut("ratchet.services.history.decide:plan_bulk_retry",
                  "        if r.retried_as is not None:  # a task is retried once: a re-run skips it\n"
                  "            plan.skipped += 1\n"
                  "            continue\n",
                  caller="ratchet.services.history.bulk.operations:_retry_batch"),)),
    Mutation(
        "step_begin_memoized",
        "A BEGIN of a step the log holds COMPLETED claims it again (attempt + 1, under this lease) "
        "instead of answering DONE with the stored result, so a committed step's function runs again "
        "on every later activation: the BEGIN's check of the row loses its COMPLETED case, the "
        "reclaim statement its RUNNING condition (it then takes a completed row of an older lease), "
        "and the read-ahead (the memo's other form: a DONE reply carries the completed entries after "
        "it, which the SDK answers from without asking) no longer carries steps, so each is begun.",
        sql=(SqlCut("workflow_step_reclaim", "s.state = 'RUNNING' AND "),
             SqlCut("workflow_steps_ahead", "'STEP', ")),
        py=(PyCut(f"{_STEPS}:_begin_step", 'row.state == "COMPLETED" or ', caller=f"{_STEPS}:run_step"),)),
    Mutation(
        "step_lease_fence",
        "A step op is not fenced by the activation's lease: the run's task row is locked whatever its "
        "state and lease epoch, and a COMMIT's compare-and-set is on (position, RUNNING) alone, so an "
        "activation whose lease expired (a zombie) still begins steps and commits its result onto the "
        "claim of the activation that took over.",
        sql=(SqlCut("workflow_lease_share", "t.state = 'LEASED' AND t.lease_epoch = $2::bigint",
                    keep="$2::bigint IS NOT NULL"),
             SqlCut("workflow_step_commit", "s.lease_epoch = $3::bigint", keep="$3::bigint IS NOT NULL"))),
)}


def missing_parts(m: Mutation) -> list[str]:
    """What a mutation cuts that the shipped code does not have at all yet (a statement or function
    still to land): a test of it is skipped, naming these. A part that exists but no longer holds
    the guard's text is not missing: building the mutant fails loudly instead."""
    out = [f"statement {c.query} (services/history/store/*.sql)" for c in m.sql if c.query not in QUERIES]
    for c in m.py:
        module_name, _, name = c.function.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            out.append(f"module {module_name}")
            continue
        if not hasattr(module, name):
            out.append(f"function {c.function}")
    return out


def mutation(name: str) -> Mutation:
    try:
        return MUTATIONS[name]
    except KeyError:
        raise MutationError(f"unknown mutation {name!r}; known: {sorted(MUTATIONS)}") from None


KEEP = re.compile(r"\$\d+::\w+ IS NOT NULL( AND \$\d+::\w+ IS NOT NULL)*")


def cut(text: str, guard: str, times: int, where: str, keep: str = "") -> str:
    """text without guard, which must occur exactly `times` times in it."""
    found = text.count(guard)
    if found != times:
        raise MutationError(f"the guard {guard!r} occurs {found} times in {where}, not {times}: the shipped "
                            f"code changed, so the mutation must change with it (tests/fault/mutants)")
    if keep and (not KEEP.fullmatch(keep) or set(re.findall(r"\$\d+", keep)) != set(re.findall(r"\$\d+", guard))):
        raise MutationError(f"{where}: a cut keeps only a tautology on the guard's own parameters, not {keep!r}")
    return text.replace(guard, keep)


def resolve(ref: str) -> tuple[types.ModuleType, str, Callable]:
    """'module:function' -> (module, name, the module's function)."""
    module_name, _, name = ref.partition(":")
    module = importlib.import_module(module_name)
    return module, name, getattr(module, name)


# -- SQL ----------------------------------------------------------------------------
def mutated_statements(m: Mutation) -> dict[tuple[str, str | None], str]:
    """{(query, within): the statement with that mutation's cuts} (within None: every call)."""
    out: dict[tuple[str, str | None], str] = {}
    for c in m.sql:
        key = (c.query, c.within)
        if c.query not in QUERIES:
            raise MutationError(f"{m.name}: no shipped statement {c.query!r}")
        out[key] = cut(out.get(key, QUERIES[c.query]), c.text, c.times, f"statement {c.query}", c.keep)
    queries = [q for q, _ in out]
    if len(queries) != len(set(queries)):
        raise MutationError(f"{m.name}: a statement is cut both everywhere and within a call")
    return out


_WITHIN: contextvars.ContextVar[str | None] = contextvars.ContextVar("mutant_within", default=None)


class MutantQueries(Mapping[str, str]):
    """The shipped registry with a mutation's statements in place of their originals."""

    def __init__(self, statements: dict[tuple[str, str | None], str]):
        self.everywhere = {q: sql for (q, within), sql in statements.items() if within is None}
        self.within = {q: (within, sql) for (q, within), sql in statements.items() if within is not None}

    def __getitem__(self, name: str) -> str:
        scoped = self.within.get(name)
        if scoped is not None and _WITHIN.get() == scoped[0]:
            return scoped[1]
        return self.everywhere.get(name) or QUERIES[name]

    def __iter__(self) -> Iterator[str]:
        return iter(QUERIES)

    def __len__(self) -> int:
        return len(QUERIES)


def store_class(m: Mutation) -> type[Store]:
    """A Store whose registry holds the mutation's statements."""
    return type(f"MutantStore_{m.name}", (Store,), {"queries": MutantQueries(mutated_statements(m)),
                                                    "mutation": m.name, "__module__": __name__})


def _inside(fn: Callable, ref: str) -> Callable:
    """fn (async), marking its calls as `within` ref for MutantQueries."""

    @functools.wraps(fn)
    async def run(*args, **kwargs):
        token = _WITHIN.set(ref)
        try:
            return await fn(*args, **kwargs)
        finally:
            _WITHIN.reset(token)

    return run


# -- Python -------------------------------------------------------------------------
def cut_source(c: PyCut) -> tuple[str, str]:
    """(shipped source, cut source) of the function."""
    fn = resolve(c.function)[2]
    shipped = textwrap.dedent(inspect.getsource(fn))
    return shipped, cut(shipped, c.text, c.times, f"function {c.function}")


def compile_function(ref: str, source: str) -> Callable:
    """The function `ref` compiled from `source` in (a copy of) its module's globals, with its
    file name, first line number and __future__ flags, so that compiling the shipped source this
    way gives the shipped code object (tests/fault/unit/test_mutants.py checks)."""
    module, name, fn = resolve(ref)
    flags = __future__.annotations.compiler_flag if module.__dict__.get("annotations") is __future__.annotations \
        else 0
    first = fn.__code__.co_firstlineno
    code = compile("\n" * (first - 1) + source, fn.__code__.co_filename, "exec", flags=flags, dont_inherit=True)
    namespace = dict(module.__dict__)
    exec(code, namespace)
    return namespace[name]


def cut_function(c: PyCut) -> Callable:
    """The function without its guard."""
    return compile_function(c.function, cut_source(c)[1])


def dispatch_tables(module: types.ModuleType, fn: Callable) -> list[str]:
    """The module's globals that are dicts holding fn as a value (a caller may reach fn through one)."""
    return [k for k, v in vars(module).items() if isinstance(v, dict) and k != "__builtins__"
            and any(x is fn for x in v.values())]


def rebound_caller(c: PyCut, replacement: Callable) -> Callable:
    """The shipped caller's own code object, bound to globals in which the cut function's name
    means `replacement`, as does its entry in any dispatch table of the caller's module."""
    module, _, caller = resolve(c.caller)
    _, name, shipped = resolve(c.function)
    namespace = dict(module.__dict__)
    namespace[name] = replacement
    for table in dispatch_tables(module, shipped):
        namespace[table] = {k: replacement if v is shipped else v for k, v in namespace[table].items()}
    out = types.FunctionType(caller.__code__, namespace, caller.__name__, caller.__defaults__, caller.__closure__)
    out.__kwdefaults__ = caller.__kwdefaults__
    out.__qualname__, out.__doc__, out.__module__ = caller.__qualname__, caller.__doc__, caller.__module__
    return out


# -- installing ---------------------------------------------------------------------
def patches(m: Mutation) -> list[tuple[object, str, object]]:
    """Every (object, attribute, new value) that installs the mutation; built eagerly, so a cut
    that no longer matches fails here, before anything is patched."""
    import ratchet.services.history.server as server

    out: list[tuple[object, str, object]] = [(server, "Store", store_class(m))]
    for ref in sorted({c.within for c in m.sql if c.within}):
        module, name, fn = resolve(ref)
        out.append((module, name, _inside(fn, ref)))
    for c in m.py:
        module, name, _ = resolve(c.caller)
        out.append((module, name, rebound_caller(c, cut_function(c))))
    return out


@contextlib.contextmanager
def installed(name: str) -> Iterator[Mutation]:
    """History with the mutation: every HistoryServer built inside uses the mutant store, and the
    mutated functions' callers call the cut copies until the block ends."""
    m = mutation(name)
    todo = patches(m)
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in todo]
    try:
        for obj, attr, value in todo:
            setattr(obj, attr, value)
        yield m
    finally:
        for obj, attr, value in reversed(saved):
            setattr(obj, attr, value)
