"""Part 2 of issue 5: what vmtune itself costs, measured in-process.

- ``rewrite-throughput``: every domain of the shared corpus and ``examples/*.xml`` through
  ``vmtune.rewrite`` per profile, on ``examples/hosts/2node-smt.xml``. Domains that vmtune refuses
  (Unsupported/InvalidInput) or that do not fit (DoesNotFit) are counted, not timed.
- ``placement-place-one``: a generated 8-node, 512-CPU host holding N tuned domains; the time to
  place one more latency domain with all N as claims.
- ``placement-plan-all``: planning N domains in sequence as ``apply --all`` would: latency
  domains first, each rewrite getting every previous output as a claim.

Variants are interleaved within each repetition (round r runs every variant once, in an order
that rotates with r), so slow drift on a shared machine hits all variants alike. Each figure is a
per-repetition value; a result reports the median over repetitions and its spread (quartiles,
min, max).
"""

from __future__ import annotations

import gc
import statistics
import time
import uuid
from pathlib import Path

from lxml import etree

import vmtune
from vmtune.errors import DoesNotFit, InvalidInput, Unsupported

from .common import CORPUS, EXAMPLES, ms_figures, quantile, summarize, time_calls

PROFILES = ("balanced", "latency", "realtime", "throughput")
EXAMPLE_HOST = EXAMPLES / "hosts" / "2node-smt.xml"
TAG_NS = "https://vmtune.dev/xmlns/1"

# -- the generated big host ----------------------------------------------------------------------
NODES, CORES_PER_NODE, THREADS = 8, 32, 2
NODE_MEMORY_KIB = 512 * 1024 * 1024  # 512 GiB per node
NODE_PAGES = {2048: 32768, 1048576: 128}  # 64 GiB of 2M and 128 GiB of 1G hugepages per node


def grid_host(nodes: int, cores: int, threads: int, memory_kib: int, pages: dict[int, int],
              distance=lambda a, b: 10 if a == b else 21, vendor: str | None = "Intel",
              isolated: frozenset[int] = frozenset()) -> vmtune.Host:
    """``nodes`` x ``cores`` x ``threads``, Intel numbering: thread t of core k on node n is CPU
    n*cores + k + t*nodes*cores; every node has ``memory_kib`` and ``pages`` free hugepages."""
    total = nodes * cores
    cpus, cells = {}, []
    for node in range(nodes):
        ids = []
        for k in range(cores):
            siblings = frozenset(node * cores + k + t * total for t in range(threads))
            for cpu in siblings:
                cpus[cpu] = vmtune.Cpu(cpu, node, socket=node, die=0, core=k, siblings=siblings)
                ids.append(cpu)
        cells.append(vmtune.Cell(node, tuple(sorted(ids)), memory_kib, dict(pages),
                                 {n: distance(node, n) for n in range(nodes)}))
    return vmtune.Host("x86_64", tuple(cells), cpus, frozenset(isolated), vendor)


def big_host() -> vmtune.Host:
    """8 nodes x 32 cores x 2 threads = 512 CPUs (thread t of core c is c + 256 t)."""
    return grid_host(NODES, CORES_PER_NODE, THREADS, NODE_MEMORY_KIB, NODE_PAGES,
                     lambda a, b: 10 if a == b else (16 if a // 4 == b // 4 else 32))


# The claimed domains cycle through this mix (profile, vCPUs, GiB). At N=300 the latency ones
# hold 120 of the 248 non-reserved cores and 480 GiB of the 1 TiB of 1G hugepages.
MIX = (("latency", 2, 4),) * 4 + (("balanced", 2, 2),) * 4 + (("throughput", 4, 8),) * 2
EXTRA = ("latency", 2, 4)  # the one more domain placed on top of N


def make_domain(i: int, profile: str, vcpus: int, gib: int, virt_type: str) -> bytes:
    """examples/stock-latency.xml renamed, resized and re-tagged (a stock virt-install domain)."""
    root = etree.parse(str(EXAMPLES / "stock-latency.xml")).getroot()
    root.set("type", virt_type)
    root.find("name").text = f"vm{i:04d}-{profile}"
    root.find("uuid").text = str(uuid.UUID(int=0x6A3D0B7E_0000_4000_8000_000000000000 + i))
    root.find(f"metadata/{{{TAG_NS}}}tune").set("profile", profile)
    for tag in ("memory", "currentMemory"):
        el = root.find(tag)
        el.set("unit", "GiB")
        el.text = str(gib)
    root.find("vcpu").text = str(vcpus)
    root.find("devices/interface/mac").set("address", f"52:54:00:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}")
    root.find("devices/disk/source").set("file", f"/var/lib/libvirt/images/vm{i:04d}.img")
    return etree.tostring(root)


def fleet(n: int, virt_type: str) -> list[bytes]:
    """N domains of the mix, in the order apply --all would plan them: latency first."""
    specs = [MIX[i % len(MIX)] for i in range(n)]
    order = sorted(range(n), key=lambda i: specs[i][0] not in ("latency", "realtime"))
    return [make_domain(i, *specs[i], virt_type) for i in order]


def plan_all(host: vmtune.Host, domains: list[bytes]) -> tuple[list[float], list[str]]:
    """Rewrite each domain with every previous output as a claim; seconds per domain, outputs."""
    outputs: list[str] = []
    times: list[float] = []
    for xml in domains:
        t0 = time.perf_counter()
        result = vmtune.rewrite(xml, host, claims=outputs)
        times.append(time.perf_counter() - t0)
        outputs.append(result.xml)
    return times, outputs


# -- rewrite throughput --------------------------------------------------------------------------
def corpus_domains() -> list[Path]:
    paths = sorted((CORPUS / "domains").glob("*.xml")) + sorted(EXAMPLES.glob("*.xml"))
    if not paths:
        raise SystemExit(f"bench: no domains found under {CORPUS / 'domains'} or {EXAMPLES}")
    return paths


def classify(host, paths, profile) -> tuple[dict[str, bytes], dict[str, list[str]]]:
    """Which domains rewrite under ``profile``; the others by reason (never timed)."""
    ok: dict[str, bytes] = {}
    skipped: dict[str, list[str]] = {"unsupported": [], "invalid": [], "does_not_fit": []}
    for path in paths:
        xml = path.read_bytes()
        label = (f"corpus/{path.parent.name}/{path.name}" if path.parent.parent == CORPUS
                 else f"examples/{path.name}")
        try:
            vmtune.rewrite(xml, host, profile)
        except Unsupported:
            skipped["unsupported"].append(label)
        except DoesNotFit:
            skipped["does_not_fit"].append(label)
        except InvalidInput:
            skipped["invalid"].append(label)
        else:
            ok[label] = xml
    return ok, skipped


def rewrite_throughput(runs: int, inner: int, log) -> list[dict]:
    host = vmtune.Host.from_capabilities(EXAMPLE_HOST.read_bytes())
    paths = corpus_domains()
    sets = {p: classify(host, paths, p) for p in PROFILES}
    samples: dict[str, list[dict]] = {p: [] for p in PROFILES}
    per_domain: dict[str, dict[str, list[float]]] = {p: {d: [] for d in sets[p][0]} for p in PROFILES}
    for r in range(runs):
        order = PROFILES[r % len(PROFILES):] + PROFILES[:r % len(PROFILES)]
        for profile in order:
            ok = sets[profile][0]
            gc.collect()
            times = []
            for label, xml in ok.items():
                for _ in range(inner):
                    t0 = time.perf_counter()
                    vmtune.rewrite(xml, host, profile)
                    dt = time.perf_counter() - t0
                    times.append(dt)
                    per_domain[profile][label].append(dt * 1e3)
            samples[profile].append({
                "p50_ms": quantile(times, 0.5) * 1e3,
                "p99_ms": quantile(times, 0.99) * 1e3,
                "mean_ms": statistics.fmean(times) * 1e3,
                "rewrites_per_s": len(times) / sum(times),
                "samples": len(times),
            })
        log(f"rewrite-throughput: round {r + 1}/{runs} done")
    out = []
    for profile in PROFILES:
        ok, skipped = sets[profile]
        spread = summarize(samples[profile], ("p50_ms", "p99_ms", "mean_ms", "rewrites_per_s"))
        out.append({
            "case": "rewrite-throughput",
            "variant": profile,
            "description": "vmtune.rewrite in-process, one domain per call, on examples/hosts/2node-smt.xml",
            "host": str(EXAMPLE_HOST.relative_to(EXAMPLES.parent)),
            "p50_ms": spread["p50_ms"]["median"],
            "p99_ms": spread["p99_ms"]["median"],
            "rewrites_per_s": spread["rewrites_per_s"]["median"],
            "spread": spread,
            "runs": runs,
            "calls_per_domain_per_run": inner,
            "domains": {"timed": len(ok), **{k: len(v) for k, v in skipped.items()}},
            "skipped": skipped,
            "per_domain_median_ms": {d: statistics.median(v) for d, v in sorted(per_domain[profile].items())},
            "per_run": samples[profile],
        })
    return out


# -- placement at scale ----------------------------------------------------------------------------
def placement(sizes: tuple[int, ...], runs: int, inner: int, virt_type: str, log) -> list[dict]:
    host = big_host()
    fleets = {n: fleet(n, virt_type) for n in sizes}
    extra = make_domain(99999, *EXTRA, virt_type)
    plan_runs: dict[int, list[dict]] = {n: [] for n in sizes}
    one_runs: dict[int, list[dict]] = {n: [] for n in sizes}
    facts: dict[int, dict] = {}
    for r in range(runs):
        order = sizes[r % len(sizes):] + sizes[:r % len(sizes)]
        for n in order:
            gc.collect()
            times, outputs = plan_all(host, fleets[n])
            total = sum(times)
            plan_runs[n].append({
                "total_s": total,
                "p50_ms": quantile(times, 0.5) * 1e3,
                "p99_ms": quantile(times, 0.99) * 1e3,
                "mean_ms": total / n * 1e3,
                "last_ms": times[-1] * 1e3,
            })
            if n not in facts:
                facts[n] = _fleet_facts(host, outputs)
            gc.collect()
            one, result = time_calls(lambda: vmtune.rewrite(extra, host, claims=outputs), inner)
            facts[n]["extra_placement"] = result.placement
            one_runs[n].append({**ms_figures(one), "samples": len(one)})
        log(f"placement: round {r + 1}/{runs} done")
    desc_host = (f"generated: {NODES} nodes x {CORES_PER_NODE} cores x {THREADS} threads = "
                 f"{NODES * CORES_PER_NODE * THREADS} CPUs, {NODE_MEMORY_KIB >> 20} GiB, "
                 f"{NODE_PAGES[2048]} x 2M and {NODE_PAGES[1048576]} x 1G hugepages per node")
    mix = [{"profile": p, "vcpus": v, "gib": g} for p, v, g in MIX]
    out = []
    for n in sizes:
        s = summarize(one_runs[n], ("p50_ms", "p99_ms", "mean_ms"))
        out.append({
            "case": "placement-place-one", "variant": f"N={n}", "claims": n,
            "description": "rewrite one more latency domain (2 vCPUs, 4 GiB) with all N planned domains as claims",
            "host": desc_host, "mix": mix, "extra": dict(zip(("profile", "vcpus", "gib"), EXTRA)),
            "p50_ms": s["p50_ms"]["median"], "p99_ms": s["p99_ms"]["median"], "spread": s,
            "runs": runs, "calls_per_run": inner, "fleet": facts[n], "per_run": one_runs[n],
        })
        s = summarize(plan_runs[n], ("total_s", "p50_ms", "p99_ms", "mean_ms", "last_ms"))
        out.append({
            "case": "placement-plan-all", "variant": f"N={n}", "claims": n,
            "description": "plan N domains in sequence, latency first, each rewrite with every previous output as a claim (as apply --all)",
            "host": desc_host, "mix": mix,
            "p50_ms": s["p50_ms"]["median"], "p99_ms": s["p99_ms"]["median"],
            "total_s": s["total_s"]["median"], "mean_ms_per_domain": s["mean_ms"]["median"],
            "last_domain_ms": s["last_ms"]["median"], "spread": s, "runs": runs,
            "fleet": {k: v for k, v in facts[n].items() if k != "extra_placement"}, "per_run": plan_runs[n],
        })
    return out


def _fleet_facts(host: vmtune.Host, outputs: list[str]) -> dict:
    """What the planned fleet holds, to show the host really is loaded (not timed)."""
    from vmtune.placement import claims as claims_mod

    ledger = claims_mod.ledger(outputs, host)
    return {
        "domains": len(outputs),
        "dedicated_cpus": len(ledger.dedicated),
        "hugepages": {f"{n}:{s}": c for (n, s), c in sorted(ledger.hugepages.items())},
        "strict_memory_kib": {str(k): v for k, v in sorted(ledger.memory.items())},
    }


def profile_plan_all(n: int, virt_type: str, path: Path, top: int = 25) -> list[str]:
    """cProfile of planning N domains; writes the top functions by cumulative and own time."""
    import cProfile
    import io
    import pstats

    host = big_host()
    domains = fleet(n, virt_type)
    prof = cProfile.Profile()
    prof.enable()
    plan_all(host, domains)
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    path.write_text(buf.getvalue(), encoding="utf-8")
    return buf.getvalue().splitlines()
