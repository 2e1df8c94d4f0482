"""`python -m loadtest.rerender RUN.jsonl [--publish]`: redo a run's comparison
(issue-5 bar, side-by-side and reference tables, rounds, shards, charts) from
its cells with the current code, keeping the rest of its Markdown report (the
machine, settings, issue-2 sections, profiles) as the run wrote it.

For when the comparison's arithmetic or layout changed after a long run: the
measurements are the run's own, only their reading is redone.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import sys
import types

from loadtest import charts, compare, results

START = "\n## Issue-5 bar\n"
END = "\n## Postgres (the bench's own cluster"
REPO = pathlib.Path(__file__).resolve().parents[1]


def _peer_info(cells) -> tuple[dict, dict]:
    from loadtest import peers
    present = set(compare.systems(cells))
    info, skipped = {}, {}
    for name in peers.PEER_MODULES:
        try:
            cls = peers.load(name)
        except Exception as e:  # noqa: BLE001 - described as skipped
            skipped[name] = str(e)
            continue
        if name in present:
            info[name] = {"label": cls.label, "version": cls.version, "config": cls.config_note,
                          "recovery": cls.recovery_note}
        else:
            skipped[name] = "not run in this run"
    return info, skipped


def _bare_report(jsonl: pathlib.Path, cells) -> str:
    """A run stopped before its report was written: tables from the cells alone (no profiles)."""
    import json

    from loadtest import machine, report, verdicts
    first = json.loads(jsonl.read_text().splitlines()[0])
    desc = machine.describe(str(jsonl.parent))
    desc["date_utc"] = f"{first['at']} (local time of the run's first cell)"
    desc.pop("loadavg_at_start", None)
    return report.render(title="Ratchet benchmark", machine=desc, pg_settings={}, cells=cells,
                         ratios=verdicts.ratios(cells), verdicts=verdicts.reference_bars(cells), sections=[],
                         notes=["Report rebuilt from the cells by loadtest.rerender: the run stopped before "
                                "writing it, so the Postgres settings and profiles are not shown."]
                         + verdicts.METHOD_NOTES, mode="full", lead_sections=[("Issue-5 bar", [])])


def rerender(jsonl: pathlib.Path, publish: bool) -> pathlib.Path:
    from loadtest import bench
    cells = results.load(jsonl)
    md_path = jsonl.with_suffix(".md")
    md = md_path.read_text() if md_path.exists() else _bare_report(jsonl, cells)
    run_id = jsonl.stem
    info, skipped = _peer_info(cells)
    run = types.SimpleNamespace(peer_info=info, skipped=skipped, charts=[])
    if charts.available() is None:
        date = next((line.split("|")[2].strip() for line in md.splitlines() if line.startswith("| date_utc |")), "")
        run.charts = charts.draw(cells, jsonl.parent, run_id, f"{date}, run {run_id}")

    def with_lead(prefix: str) -> str:
        lead = bench.comparison_sections(run, cells, prefix)
        body = "".join(f"\n## {t}\n\n" + "\n".join(lines) + "\n" for t, lines in lead)
        head, tail = (md.split(START, 1)[0], END + md.split(END, 1)[1]) if START in md else (
            md.split(END, 1)[0], END + md.split(END, 1)[1])
        return head.rstrip("\n") + "\n" + body + tail
    md_path.write_text(with_lead(run_id))
    if publish:
        dest = REPO / "docs" / "benchmarks"
        (dest / "latest.md").write_text(with_lead("latest"))
        shutil.copyfile(jsonl, dest / "latest.jsonl")
        for _, name in run.charts:
            shutil.copyfile(jsonl.parent / name, dest / f"latest-{name.split('-', 1)[1]}")
    return md_path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtest.rerender", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("jsonl", type=pathlib.Path, help="loadtest/results/<run>.jsonl (its .md beside it)")
    p.add_argument("--publish", action="store_true", help="also write docs/benchmarks/latest.*")
    args = p.parse_args(argv)
    print(rerender(args.jsonl, args.publish))
    return 0


if __name__ == "__main__":
    sys.exit(main())
