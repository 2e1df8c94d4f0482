"""The chaos report: one row per run (scenario, faults, operations, lost,
duplicates and why, verdict), as report.json and a Markdown table."""

from __future__ import annotations

import collections
import json
import pathlib


def row(verdict: dict) -> dict:
    """The results-table row of one run."""
    inv = verdict["invariants"]
    faults = collections.Counter(e["f"] for e in verdict.get("schedule", []) if e.get("type") == "invoke")
    dup = inv.get("duplicates_explained", {}).get("counts", {})
    wf_log = inv.get("wf_step_log", {}).get("counts", {})
    wf_claims = inv.get("wf_step_claims", {}).get("counts", {})
    acked = inv.get("acked_terminal", {}).get("counts", {})
    failing = [name for name, r in inv.items() if not r["valid"]]
    mutation = verdict.get("mutation")
    if mutation:
        caught = [name for name in failing if name in mutation["must_fail"]]
        status = f"caught by {', '.join(caught)}" if caught else "MISSED"
    else:
        status = "VALID" if verdict["valid"] else "INVALID: " + ", ".join(failing)
    return {"scenario": verdict.get("scenario"), "seed": verdict.get("seed"),
            "mutation": (mutation or {}).get("mutation"),
            "faults": dict(faults), "ops": verdict["stats"]["ops"], "acked": verdict["stats"]["acked"],
            "ambiguous": verdict["stats"]["ambiguous"], "lost": acked.get("lost"), "stuck": acked.get("stuck"),
            "executions": dup.get("executions"), "extra_executions": dup.get("extra_executions"),
            "duplicate_side_effects": dup.get("duplicate_side_effects"), "why": dup.get("why", {}),
            "wf_runs": wf_log.get("runs", 0), "wf_by_state": wf_log.get("by_state", {}),
            "wf_re_executions": wf_claims.get("re_executions", 0), "wf_why": wf_claims.get("why", {}),
            "status": status, "failing": failing, "harness_errors": verdict.get("harness", {}).get("errors", []),
            "seconds": verdict.get("harness", {}).get("seconds"), "rerun": verdict.get("rerun")}


def markdown(rows: list[dict]) -> str:
    lines = ["| scenario | faults injected | ops (acked / ambiguous) | lost | stuck | duplicate side effects (why) "
             "| workflow runs (step re-runs, why) | verdict |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        faults = ", ".join(f"{k} x{v}" for k, v in sorted(r["faults"].items())) or "none"
        why = ", ".join(f"{k} {v}" for k, v in sorted(r["why"].items()))
        name = r["scenario"] + (f" (mutant: {r['mutation']} removed)" if r["mutation"] else "")
        wf_why = ", ".join(f"{k} {v}" for k, v in sorted(r.get("wf_why", {}).items()))
        wf = (f"{r.get('wf_runs', 0)} ({r.get('wf_re_executions', 0)}{f', {wf_why}' if wf_why else ''})"
              if r.get("wf_runs") else "none")
        dup = f"{r['duplicate_side_effects']}{f' ({why})' if why else ''}"
        lines.append(f"| {name} | {faults} | {r['ops']} ({r['acked']} / {r['ambiguous']}) | {r['lost']} | "
                     f"{r['stuck']} | {dup} | {wf} | {r['status']} |")
    return "\n".join(lines) + "\n"


def write_report(verdicts: list[dict], folder: pathlib.Path) -> pathlib.Path:
    rows = [row(v) for v in verdicts]
    (folder / "report.json").write_text(json.dumps(rows, indent=1, default=str))
    (folder / "report.md").write_text(markdown(rows))
    return folder / "report.md"
