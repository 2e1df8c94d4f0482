"""The task state machine the checker holds the transition logs to.

`ratchet.libs.taskstate` is the single source of truth; this module uses it
when it is importable and otherwise falls back to the copy of the decided
semantics in docs/team/brief.md, so the checker works before the module lands
and follows it afterwards.
"""

from __future__ import annotations

CREATE = None  # from_state of the first transition (the task did not exist)

_FALLBACK_ALLOWED = {
    CREATE: {"ENQUEUED"},
    "ENQUEUED": {"LEASED", "CANCELED", "EXPIRED"},
    "LEASED": {"SUCCEEDED", "RETRY_WAIT", "FAILED", "CANCELED", "WAITING"},
    "RETRY_WAIT": {"ENQUEUED", "CANCELED", "EXPIRED"},
    "WAITING": {"ENQUEUED", "CANCELED", "EXPIRED"},  # workflows (issue 24)
}
_FALLBACK_TERMINAL = {"SUCCEEDED", "FAILED", "CANCELED", "EXPIRED"}


def _name(state) -> str | None:
    if state is None:
        return None
    name = getattr(state, "name", state)
    return str(name).upper().removeprefix("TASK_STATE_")


def _from_module():
    try:
        from ratchet.libs import taskstate  # type: ignore[attr-defined]  # lands with the history work
    except ImportError:
        return None
    allowed_src = getattr(taskstate, "ALLOWED", None)
    if allowed_src is None:
        return None
    allowed: dict[str | None, set[str]] = {}
    if isinstance(allowed_src, dict):
        for src, dsts in allowed_src.items():
            key = None if src in (None, "", "CREATE", "(create)") else _name(src)
            allowed.setdefault(key, set()).update(_name(d) for d in dsts)
    else:  # a set of (from, to) pairs
        for src, dst in allowed_src:
            key = None if src in (None, "", "CREATE", "(create)") else _name(src)
            allowed.setdefault(key, set()).add(_name(dst))
    terminal_src = getattr(taskstate, "TERMINAL", None) or _FALLBACK_TERMINAL
    return allowed, {_name(s) for s in terminal_src}, "ratchet.libs.taskstate"


def load() -> tuple[dict[str | None, set[str]], set[str], str]:
    """(ALLOWED, TERMINAL, source) with states as upper-case names."""
    found = _from_module()
    if found and found[0]:
        return found
    return _FALLBACK_ALLOWED, _FALLBACK_TERMINAL, "fallback copy of docs/team/brief.md"


ALLOWED, TERMINAL, SOURCE = load()


def allowed(src: str | None, dst: str) -> bool:
    """True if the machine allows src -> dst (src None means creation)."""
    return dst in ALLOWED.get(src, set())


def is_terminal(state: str | None) -> bool:
    return state in TERMINAL
