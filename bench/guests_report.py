"""Markdown tables of part 1's result files: ``.venv/bin/python -m bench.guests_report [DIR]``.

One table per case: the variant, p50 and p99 in microseconds (median over repetitions, then the
interquartile range and min-max of the per-repetition figures), and the ratio to stock with its
bootstrap interval, the rank test's p and the verdict. This is how BENCHMARKS.md's part 1 tables
are made.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .common import ROOT
from .guests import CASES, SCHED_CASE, VARIANTS


def _fig(s: dict) -> str:
    """'median (q1–q3; min–max)' in microseconds."""
    us = {k: s[k] * 1000 for k in ("median", "q1", "q3", "min", "max")}
    fmt = "{:.0f}" if us["median"] >= 100 else "{:.1f}"
    f = fmt.format
    return f"{f(us['median'])} ({f(us['q1'])}–{f(us['q3'])}; {f(us['min'])}–{f(us['max'])})"


def _cmp(c: dict | None) -> str:
    if not c or c.get("ratio") is None:
        return "–"
    text = f"×{c['ratio']:.2f}"
    if c.get("ci95"):
        lo, hi = c["ci95"]
        text += f" [{lo:.2f}–{hi:.2f}], p={c['p']:.3f}"
    verdict = c["verdict"]
    if verdict.startswith("too few"):
        verdict = "too few runs"
    return f"{text}: **{verdict}**" if "beyond" in verdict else f"{text}: {verdict}"


def tables(out_dir: Path) -> str:
    recs = {}
    for path in out_dir.glob("guest-*.json"):
        rec = json.loads(path.read_text())
        recs[(rec["case"], rec["variant"])] = rec
    if not recs:
        return f"no part 1 results in {out_dir}\n"
    lines = []
    any_rec = next(iter(recs.values()))
    loads = [run["loadavg_1min_after"] for r in recs.values() for run in r["per_run"] if "loadavg_1min_after" in run]
    load = f", {min(loads):.1f}–{max(loads):.1f} after the boots" if loads else ""
    lines.append(f"virt_type `{any_rec['virt_type']}` ({any_rec['virt_type_note']}); "
                 f"{any_rec['setup']['reps']} repetitions per variant; 1-minute load average "
                 f"{any_rec['machine']['loadavg_at_start'][0]} at the start{load}\n")
    for case in (*CASES, SCHED_CASE):
        rows = [recs[(case, v)] for v in VARIANTS if (case, v) in recs]
        if not rows:
            continue
        what = rows[0]["what"]
        lines.append(f"#### `{case}`: {what} ({rows[0]['ops_per_run']} per boot, "
                     f"{rows[0]['runs']} boots per variant)\n")
        lines.append("| variant | p50 µs | p99 µs | p50 vs stock | p99 vs stock | guest clocksource |")
        lines.append("|---|---|---|---|---|---|")
        for r in rows:
            clock = sorted({run["facts"].get("clocksource", "?") for run in r["per_run"]})
            vs = r.get("vs_stock", {})
            lines.append(f"| {r['variant']} | {_fig(r['spread']['p50_ms'])} | {_fig(r['spread']['p99_ms'])} | "
                         f"{_cmp(vs.get('p50'))} | {_cmp(vs.get('p99'))} | {', '.join(clock)} |")
            if "vs_virtio" in r:
                extra = r["vs_virtio"]
                lines.append(f"| iothread vs virtio | | | {_cmp(extra.get('p50'))} | {_cmp(extra.get('p99'))} | |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    out_dir = Path(argv[0]) if argv else ROOT / "bench" / "results"
    sys.stdout.write(tables(out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
