"""The fault checker: pure Python over a run's client history, execution ledger
and final shard dump. See ``model`` for the input formats, ``core`` for the
registry and the verdict, ``invariants/`` for the checks.

    from tests.fault.checker import Run, check
    verdict = check(Run.load("runs/2026-.../"))
"""

from .core import MODULES, check, invariant
from .model import Run

__all__ = ["MODULES", "Run", "check", "check_dir", "invariant"]


def check_dir(run_dir, write: bool = True) -> dict:
    """Check a run folder and (by default) write its verdict.json beside the inputs."""
    import json
    import pathlib

    verdict = check(Run.load(run_dir))
    if write:
        (pathlib.Path(run_dir) / "verdict.json").write_text(json.dumps(verdict, indent=1, default=str))
    return verdict
