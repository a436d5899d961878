"""Markdown tables of part 1's result files: ``.venv/bin/python -m bench.guests_report [DIR]``.

One table per case: the variant, p50 and p99 in microseconds (median over repetitions, then the
interquartile range and min-max of the per-repetition figures), and the ratio to stock with its
bootstrap interval, the rank test's p and the verdict; then a row per extra comparison (``iothread``
vs ``virtio``, the emulator variant vs ``tuned``). ``guest-sched`` is two tables: the hog guest, and
the host hogs (``*-hosthog``, compared with ``stock-hosthog``). The "hook lease" column says in how
many boots the hook held a lease for the guest while it ran. This is how BENCHMARKS.md's part 1
tables are made.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .common import ROOT
from .guests import CASES, EXTRA_BASES, HOSTHOG, SCHED_CASE, SCHED_VARIANTS, VARIANTS


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


def _lease(r: dict) -> str:
    hook = r.get("hook") or {}
    if not hook.get("tagged"):
        return "untagged"
    return f"{hook.get('boots_with_lease', 0)}/{r['runs']}"


def _table(lines: list[str], rows: list[dict], base: str, extra: bool = True) -> None:
    key = f"vs_{base.replace('-', '_')}"
    lines.append(f"| variant | p50 µs | p99 µs | p50 vs {base} | p99 vs {base} | hook lease | guest clocksource |")
    lines.append("|---|---|---|---|---|---|---|")
    for r in rows:
        clock = sorted({run["facts"].get("clocksource", "?") for run in r["per_run"]})
        vs = r.get(key, {})
        lines.append(f"| {r['variant']} | {_fig(r['spread']['p50_ms'])} | {_fig(r['spread']['p99_ms'])} | "
                     f"{_cmp(vs.get('p50'))} | {_cmp(vs.get('p99'))} | {_lease(r)} | {', '.join(clock)} |")
    if extra:
        for r in rows:
            for other in EXTRA_BASES.get(r["variant"], ()):
                cmp = r.get(f"vs_{other.replace('-', '_')}")
                if cmp and other != base:
                    lines.append(f"| {r['variant']} vs {other} | | | {_cmp(cmp.get('p50'))} | {_cmp(cmp.get('p99'))} | | |")
    lines.append("")


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
    hook = any_rec["setup"].get("hook")
    if hook:
        lines.append(f"hook: installed by {hook.get('installed_by')}"
                     + (f", libvirtd restarted ({hook.get('libvirtd_restart_s')} s)" if hook.get("libvirtd_restart_s") else "")
                     + (f"; host as before after the teardown: {hook.get('host_restored')}" if "host_restored" in hook else "")
                     + (f"; {hook['why']}" if hook.get("why") else "") + "\n")
    for case in CASES:
        rows = [recs[(case, v)] for v in VARIANTS if (case, v) in recs]
        if not rows:
            continue
        lines.append(f"#### `{case}`: {rows[0]['what']} ({rows[0]['ops_per_run']} per boot, "
                     f"{rows[0]['runs']} boots per variant)\n")
        _table(lines, rows, "stock")
    for hosthog in (False, True):
        rows = [recs[(SCHED_CASE, v)] for v in SCHED_VARIANTS
                if (SCHED_CASE, v) in recs and v.endswith(HOSTHOG) == hosthog]
        if not rows:
            continue
        lines.append(f"#### `{SCHED_CASE}`{' (host hogs)' if hosthog else ''}: {rows[0]['what']} "
                     f"({rows[0]['ops_per_run']} per boot, {rows[0]['runs']} boots per variant)\n")
        _table(lines, rows, f"stock{HOSTHOG}" if hosthog else "stock")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    out_dir = Path(argv[0]) if argv else ROOT / "bench" / "results"
    sys.stdout.write(tables(out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
