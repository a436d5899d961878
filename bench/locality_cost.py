"""What issue 24's placement costs: L3 domains, core kinds and device nodes.

- ``placement-l3``: a generated host of 256 CPUs (4 nodes x 32 cores x 2 threads) with 16 L3
  domains of 8 cores, and a PCI device on each node; N domains of the placement mix planned on it
  (every tenth latency one passes a device through), then the time to place one more latency
  domain (2 vCPUs, with a device) with all N as claims. Issue 24 asks for under 50 ms at N=300.
- ``rewrite-against`` (``--rewrite-against REV``): rewrite throughput of this tree and of REV (a
  temporary git worktree) in one interleaved run, each in a process of its own (``.venv``'s
  interpreter, ``PYTHONPATH`` its tree; fresh ones every five rounds, for a process carries up to 5%
  of its own speed for its whole life). A round rewrites every (domain, profile) pair of the
  corpus and ``examples/*.xml`` that both trees place, on two hosts: ``examples/hosts/2node-smt.xml``
  (no caches) and the corpus AMD host with 8 L3 domains; the order of the two processes alternates
  every round, and the figure is this tree's rate over REV's, paired by round: over every pair (variant
  REV), and over each profile's pairs apart (variant ``REV PROFILE``: a round times each profile's
  pairs on their own), the figure issue 33 holds every profile to; and where the difference is
  (variant ``REV by domain``: each pair's ms per rewrite in both trees, the widest difference first).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import vmtune
from vmtune.host.devices import Location, Table
from vmtune.host.topology import L3

from .common import CORPUS, EXAMPLES, ROOT, ms_figures, quantile, summarize, time_calls, worktree
from .costs import MIX, PROFILES, grid_host, make_domain

NODES, CORES, THREADS, L3_CORES = 4, 32, 2, 8
SIZES = {"full": ((10, 100, 300), 5, 10), "quick": ((10, 100), 3, 3), "smoke": ((10,), 1, 1)}
AMD = CORPUS / "hosts" / "lv-caps-x86_64-amd-2socket-8die-smt.xml"
HOSTS = {"2node-smt": EXAMPLES / "hosts" / "2node-smt.xml", "amd-8l3": AMD}
ROUNDS = {"full": 40, "quick": 6, "smoke": 2}


def l3_host() -> vmtune.Host:
    """4 nodes x 32 cores x 2 threads, an L3 per 8 cores (16 in all), a GPU on each node."""
    base = grid_host(NODES, CORES, THREADS, 512 << 20, {2048: 32768, 1048576: 128})
    cpus = {c: _with_l3(cpu) for c, cpu in base.cpus.items()}
    groups: dict[int, set[int]] = {}
    for cpu in cpus.values():
        groups.setdefault(cpu.l3, set()).add(cpu.id)
    from dataclasses import replace

    host = replace(base, cpus=cpus, caches=tuple(L3(i, frozenset(g), 32768) for i, g in sorted(groups.items())))
    return host.with_devices(Table({("pci", _gpu(n)): Location(True, n) for n in range(NODES)}))


def _with_l3(cpu):
    from dataclasses import replace

    return replace(cpu, l3=cpu.node * (CORES // L3_CORES) + cpu.core // L3_CORES)


def _gpu(node: int) -> str:
    return f"0000:{0x20 * (node + 1):02x}:00.0"


def _with_device(xml: bytes, node: int) -> bytes:
    address = _gpu(node)
    dev = (f"<hostdev mode='subsystem' type='pci' managed='yes'><source><address domain='0x0000' "
           f"bus='0x{address[5:7]}' slot='0x00' function='0x0'/></source></hostdev>").encode()
    return xml.replace(b"</devices>", dev + b"</devices>")


def fleet(n: int, virt_type: str) -> list[bytes]:
    specs = [MIX[i % len(MIX)] for i in range(n)]
    order = sorted(range(n), key=lambda i: specs[i][0] not in ("latency", "realtime"))
    out = []
    for i in order:
        xml = make_domain(i, *specs[i], virt_type)
        out.append(_with_device(xml, i % NODES) if specs[i][0] == "latency" and i % 10 == 0 else xml)
    return out


def placement(size: str, virt_type: str, log) -> list[dict]:
    sizes, runs, inner = SIZES[size]
    host = l3_host()
    fleets = {n: fleet(n, virt_type) for n in sizes}
    extra = _with_device(make_domain(99999, "latency", 2, 4, virt_type), 3)
    per: dict[int, list[dict]] = {n: [] for n in sizes}
    facts: dict[int, dict] = {}
    for r in range(runs):
        for n in sizes[r % len(sizes):] + sizes[:r % len(sizes)]:
            outputs = []
            for xml in fleets[n]:
                try:
                    outputs.append(vmtune.rewrite(xml, host, claims=outputs).xml)
                except vmtune.DoesNotFit:
                    continue
            gc.collect()
            times, result = time_calls(lambda: vmtune.rewrite(extra, host, claims=outputs), inner)
            facts[n] = {"planned": len(outputs), "placement": result.placement}
            per[n].append(ms_figures(times))
        log(f"placement-l3: round {r + 1}/{runs} done")
    out = []
    for n in sizes:
        s = summarize(per[n], ("p50_ms", "p99_ms", "mean_ms"))
        out.append({
            "case": "placement-l3", "variant": f"N={n}", "claims": n,
            "description": "rewrite one more latency domain (2 vCPUs, 4 GiB, a GPU on node 3) with N planned "
                           "domains as claims, on a 256-CPU host with 16 L3 domains and a GPU per node",
            "host": f"generated: {NODES} nodes x {CORES} cores x {THREADS} threads, an L3 per {L3_CORES} cores",
            "p50_ms": s["p50_ms"]["median"], "p99_ms": s["p99_ms"]["median"], "spread": s, "runs": runs,
            "calls_per_run": inner, "fleet": facts[n], "per_run": per[n], "goal_ms": 50,
        })
    return out


# -- re-tuning against a first rewrite -------------------------------------------------------------
def retune(size: str, log) -> list[dict]:
    """Per round, every corpus (domain, profile) pair on both hosts rewritten fresh, then its output
    rewritten again with the same profile (a re-tuning: the record taken back, the changes worked out
    from the input as given); the order alternates by round; ratio: re-tune ms / fresh ms, paired."""
    paths = sorted((CORPUS / "domains").glob("*.xml")) + sorted(EXAMPLES.glob("*.xml"))
    hosts = {k: vmtune.Host.from_capabilities(v.read_bytes()) for k, v in HOSTS.items()}
    pairs = []
    for host in hosts.values():
        for path in paths:
            xml = path.read_bytes()
            for prof in PROFILES:
                try:
                    pairs.append((host, xml, vmtune.rewrite(xml, host, prof).xml, prof))
                except vmtune.VmtuneError:
                    continue
    rounds = ROUNDS[size]
    per_round = []
    for r in range(rounds):
        times: dict[str, list[float]] = {}
        for which in (("fresh", "again") if r % 2 == 0 else ("again", "fresh")):
            gc.collect()
            times[which] = []
            for host, xml, tuned, prof in pairs:
                source = xml if which == "fresh" else tuned
                t0 = time.perf_counter()
                vmtune.rewrite(source, host, prof)
                times[which].append(time.perf_counter() - t0)
        fresh, again = ms_figures(times["fresh"]), ms_figures(times["again"])
        per_round.append({**again, "ms_fresh": fresh["mean_ms"], "ratio": again["mean_ms"] / fresh["mean_ms"]})
        log(f"retune: round {r + 1}/{rounds}")
    s = summarize(per_round, ("p50_ms", "p99_ms", "mean_ms", "ms_fresh", "ratio"))
    return [{
        "case": "retune", "variant": "corpus",
        "description": "a rewrite of a domain vmtune tuned before (its output, same profile) against a first "
                       "rewrite of the domain, over the corpus pairs on both hosts, interleaved by round; "
                       "p50/p99/mean: the re-tuning's ms per call; ratio: its mean / the first rewrite's, by round",
        "pairs": len(pairs), "runs": rounds, "hosts": list(HOSTS),
        "p50_ms": s["p50_ms"]["median"], "p99_ms": s["p99_ms"]["median"],
        "ratio_median": s["ratio"]["median"], "spread": s, "per_run": per_round,
    }]


# -- this tree against another revision ------------------------------------------------------------
WORKER = r"""
import json, sys, time
from pathlib import Path
import vmtune
from vmtune.errors import VmtuneError
hosts = {k: vmtune.Host.from_capabilities(Path(v).read_bytes()) for k, v in json.loads(sys.argv[1]).items()}
paths = json.loads(sys.argv[2])
profiles = ("balanced", "latency", "realtime", "throughput")
ok = []
for h, host in hosts.items():
    for p in paths:
        for prof in profiles:
            try:
                vmtune.rewrite(Path(p).read_bytes(), host, prof)
            except VmtuneError:
                continue
            ok.append([h, p, prof])
print(json.dumps(ok), flush=True)
pairs = [(hosts[h], Path(p).read_bytes(), prof) for h, p, prof in json.loads(sys.stdin.readline())]
groups = {prof: [(host, xml) for host, xml, p in pairs if p == prof] for prof in profiles}
clock = time.perf_counter
for line in sys.stdin:
    took, each = {}, {}
    for prof, group in groups.items():
        t0 = clock()
        mine = each[prof] = []
        for host, xml in group:
            t = clock()
            vmtune.rewrite(xml, host, prof)
            mine.append(clock() - t)
        took[prof] = clock() - t0
    print(json.dumps({"took": took, "each": each}), flush=True)
"""


def against(rev: str, size: str, log) -> list[dict]:
    with worktree(rev, log) as (label, tree):
        return _against(label, tree, ROUNDS[size], log)


def _against(label: str, tree: Path, rounds: int, log) -> list[dict]:
    paths = [str(p) for p in sorted((CORPUS / "domains").glob("*.xml")) + sorted(EXAMPLES.glob("*.xml"))]
    hosts = {k: str(v) for k, v in HOSTS.items()}
    seconds: dict[str, list[dict]] = {"this": [], label: []}  # a round: each profile's time, each rewrite's
    both: list = []
    for first in range(0, rounds, PER_PROCESS):  # fresh processes every PER_PROCESS rounds
        procs, both = _workers(label, tree, hosts, paths)
        for r in range(first, min(first + PER_PROCESS, rounds)):
            for name in (list(procs) if r % 2 == 0 else list(procs)[::-1]):
                procs[name].stdin.write("go\n")
                procs[name].stdin.flush()
                seconds[name].append(json.loads(procs[name].stdout.readline()))
            log(f"rewrite-against {label}: round {r + 1}/{rounds}")
        for p in procs.values():
            p.stdin.close()
            p.wait()
    counts = {prof: sum(1 for *_, p in both if p == prof) for prof in PROFILES}
    took = {name: [r["took"] for r in runs] for name, runs in seconds.items()}
    out = [_paired(label, label, len(both), rounds, [(sum(a.values()), sum(b.values()))
                                                    for a, b in zip(took["this"], took[label])])]
    for prof, n in counts.items():  # issue 33's figure: each profile apart
        if n:
            out.append(_paired(label, f"{label} {prof}", n, rounds,
                               [(a[prof], b[prof]) for a, b in zip(took["this"], took[label])]))
    names = {prof: [(h, Path(p).name) for h, p, pr in both if pr == prof] for prof in PROFILES}
    out.append(_by_domain(label, names, [r["each"] for r in seconds["this"]], [r["each"] for r in seconds[label]]))
    return out


# A process carries its own speed for its whole life (memory layout, hash seeds): two processes of
# the same code differ by up to 5%. Fresh ones every few rounds average that out of the figure.
PER_PROCESS = 5


def _workers(label: str, tree: Path, hosts: dict, paths: list[str]) -> tuple[dict, list]:
    """A worker process of this tree and one of ``tree``, each told the (host, domain, profile) pairs
    both place: the processes and those pairs."""
    procs = {}
    for name, root in (("this", ROOT), (label, tree)):
        env = {**os.environ, "PYTHONPATH": str(root)}
        procs[name] = subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(hosts), json.dumps(paths)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=root)
    lists = {name: json.loads(p.stdout.readline()) for name, p in procs.items()}
    both = [x for x in lists["this"] if x in lists[label]]
    for p in procs.values():
        p.stdin.write(json.dumps(both) + "\n")
        p.stdin.flush()
    return procs, both


def _by_domain(label: str, names: dict[str, list[tuple[str, str]]], this: list[dict], rev: list[dict]) -> dict:
    """Where the difference is: each (host, domain, profile) pair's ms per rewrite in this tree and in
    REV (the median of its rounds, each rewrite timed alone), the widest difference first, and how
    much of the whole difference the five widest make."""
    rows = []
    for prof, pairs in names.items():
        for i, (host, domain) in enumerate(pairs):
            a = quantile([r[prof][i] for r in this], 0.5) * 1e3
            b = quantile([r[prof][i] for r in rev], 0.5) * 1e3
            rows.append({"host": host, "domain": domain, "profile": prof, "ms_this": a, "ms_rev": b,
                         "ratio": b / a, "gap_ms": a - b})
    rows.sort(key=lambda r: -r["gap_ms"])
    gap = sum(r["gap_ms"] for r in rows)
    return {
        "case": "rewrite-against", "variant": f"{label} by domain",
        "description": f"each (host, domain, profile) pair's ms per rewrite in this tree and in {label} (the median "
                       "of its rounds, each rewrite timed alone), the widest difference (this tree's ms - "
                       f"{label}'s) first; top5_share: the five widest pairs' part of the whole difference; "
                       "p50/p99 and the spread: over the pairs",
        "pairs": len(rows), "runs": len(this), "hosts": list(HOSTS), "gap_ms": gap,
        "top5_share": sum(r["gap_ms"] for r in rows[:5]) / gap if gap else 0.0,
        "p50_ms": quantile([r["ms_this"] for r in rows], 0.5), "p99_ms": quantile([r["ms_this"] for r in rows], 0.99),
        "spread": summarize(rows, ("ms_this", "ms_rev", "ratio", "gap_ms")), "rows": rows,
    }


def _paired(label: str, variant: str, pairs: int, rounds: int, seconds: list[tuple[float, float]]) -> dict:
    """One rewrite-against record: ``pairs`` rewrites a round, (this tree's, REV's) seconds a round."""
    per_round = [{"rate_this": pairs / a, "rate_rev": pairs / b, "ratio": b / a,
                  "ms_this": a / pairs * 1e3, "ms_rev": b / pairs * 1e3} for a, b in seconds]
    s = summarize(per_round, ("rate_this", "rate_rev", "ratio", "ms_this", "ms_rev"))
    return {
        "case": "rewrite-against", "variant": variant,
        "description": f"rewrites/s of this tree over {label}'s (ratio: this tree's rate / {label}'s), paired by "
                       "round, interleaved, one process each, fresh ones every five rounds; p50/p99: this tree's ms "
                       "per rewrite over the rounds"
                       + ("" if variant == label else f"; the {variant.split()[-1]} profile's pairs only"),
        "pairs": pairs, "runs": rounds, "hosts": list(HOSTS),
        "p50_ms": s["ms_this"]["median"], "p99_ms": quantile([r["ms_this"] for r in per_round], 0.99),
        "ratio_median": s["ratio"]["median"], "spread": s, "per_run": per_round,
    }
