"""bench/run [--quick|--smoke] [--out DIR] [--virt-type qemu|kvm]: run the benchmarks, write JSON results.

Part 2 of issue 5 (what vmtune costs) runs in-process. Part 1 (what a guest gains, bench/guests.py)
boots real guests through the system libvirtd; it needs root, and is skipped with a message when
that or libvirtd/QEMU is not available. Its tuned guests run with vmtune's hook installed in the
system libvirtd (bench/guest_hook.py: installed before the first guest, removed and libvirtd
restarted after the last; ``index.json`` → ``part1_hook``). ``--virt-type`` is recorded in every
result: it is the ``type=`` of part 1's guests and of part 2's generated placement domains (the corpus domains keep
their own). ``--part 1|2`` runs one part only.

The ``host-isolation`` case (bench/host_isolation.py: a busy pinned probe on the host, with host
work around it, without a lease and with the hook's lease, isolation off and on) runs in the full
run and alone with ``--part host-isolation``. It needs root and two online CPUs, and is skipped
with a message otherwise. So does the ``host-noise`` case (bench/host_noise.py: oslat from rt-tests on
the CPU a lease holds, idle, with host hogs, and with the hook's lease: isolation off, on without
the knobs of issue 17, on with them, and with a real irqbalance running), alone with
``--part host-noise``.

The ``guest-disk-queues`` case (bench/disk_queues.py: a disk's queues over two iothreads, as vmtune
writes them for libvirt >= 10 and QEMU >= 9, against one iothread; function under TCG) runs in the
full run and alone with ``--part disk-queues`` where libvirt and QEMU are new enough (skipped with
the versions otherwise: on this project's machines, inside ``scripts/cgroup2-guest --libvirt``).

The ``map`` case (bench/map_cost.py: ``vmtune map``'s model and views for a 256-CPU host with 40
domains) runs with part 2 and alone with ``--part map``.

``--hook-against REV`` (part 2) also times REV's hook in the hook-cost case's interleaved rounds,
from a temporary git worktree of REV (bench/hook_cost.py): variants ``SHORT:tagged-prepare`` etc.

The ``placement-l3`` case (bench/locality_cost.py: placing one more latency domain with a GPU on a
256-CPU host with 16 L3 domains, N claims) and the ``retune`` case (a rewrite of a domain vmtune
tuned before against a first rewrite, over the corpus) run with part 2 and alone with ``--part
locality``; ``--rewrite-against REV`` adds the ``rewrite-against`` case there: this tree's rewrite throughput
over REV's, in one interleaved run, over every pair and per profile. The ``rewrite-steps`` and
``rewrite-bound`` cases (bench/rewrite_steps.py: where a latency and a realtime rewrite's time goes,
and the rewrite without the record and the byte-keeping writer) run there too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from . import (costs, disk_queues, guests, hook_cost, host_isolation, host_noise, locality_cost, map_cost,
               rewrite_steps)
from .common import ROOT, machine, versions, write_result

# The --part values that run the host-isolation case (None: the full run). Not "1" yet:
# tests/test_bench.py's part-1 test expects exactly the guest cases in a --part 1 run.
ISOLATION_PARTS = (None, "host-isolation")
NOISE_PARTS = (None, "host-noise")

FULL = {"rewrite_runs": 9, "rewrite_inner": 5, "sizes": (10, 30, 100, 300), "placement_runs": 5, "place_inner": 10}
QUICK = {"rewrite_runs": 3, "rewrite_inner": 1, "sizes": (10, 30, 100), "placement_runs": 3, "place_inner": 3}
# part 1 (bench/guests.py): guest boots per variant, operations per boot and test. guest-sched has
# 6 variants (hog guest and host hogs; vmtune's emulator pin and the emulator beside the vCPU): 7
# boots each gives its comparisons more power; the full part 1 takes about 20 minutes here
GUESTS_FULL = {"reps": 5, "sched_reps": 7, "disk_ops": 1000, "net_ops": 1000, "timer_ops": 1000,
               "sched_ops": 2000, "warmup": 50, "timeout_s": 600}
GUESTS_QUICK = {"reps": 1, "sched_reps": 1, "disk_ops": 200, "net_ops": 200, "timer_ops": 200,
                "sched_ops": 300, "warmup": 20, "timeout_s": 300}
# --smoke (the test command's run): each scenario booted once, the variant matrix left to --quick
# and the full run: stock and tuned (disk, net, timer in one boot each; tuned through the hook), and
# guest-sched's two flavours, tuned beside a hog guest and tuned beside host hogs
GUESTS_SMOKE = {**GUESTS_QUICK, "variants": ("stock", "tuned"), "sched_variants": ("tuned", "tuned-hosthog")}
GUESTS = {"full": GUESTS_FULL, "quick": GUESTS_QUICK, "smoke": GUESTS_SMOKE}


def _part(what: str, records: list, log, unavailable: type[Exception], errors: tuple, run) -> dict:
    """Run one optional part, adding its records: ``{"ran": True}``, or why it was skipped
    (``unavailable``) or failed (``errors``)."""
    try:
        records += run()
    except unavailable as exc:
        log(f"{what} skipped: {exc}")
        return {"ran": False, "skipped": str(exc)}
    except errors as exc:
        log(f"{what} FAILED: {exc}")
        return {"ran": False, "failed": str(exc)}
    return {"ran": True}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/run", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="every part, short (about 15 s here)")
    ap.add_argument("--smoke", action="store_true",
                    help="as --quick, with each scenario once: part 1 boots stock, tuned and guest-sched's two "
                         "flavours only, the host cases one round (the test command's run)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="where the JSON goes")
    ap.add_argument("--virt-type", choices=("qemu", "kvm"), default="qemu",
                    help="recorded in every result; type= of the generated domains (default qemu: TCG)")
    ap.add_argument("--cprofile", action="store_true",
                    help="also write a cProfile of planning the largest N (not timed)")
    ap.add_argument("--part", choices=("1", "2", "host-isolation", "host-noise", "map", "locality", "disk-queues"),
                    help="only part 1 (guests through libvirt, root), part 2 (vmtune's own cost), "
                         "the host-isolation case, the host-noise case (oslat; root), the map case or the "
                         "disk-queues case (libvirt >= 10 and QEMU >= 9: bench/disk_queues.py)")
    ap.add_argument("--hook-against", metavar="REV",
                    help="part 2's hook cost also times REV's hook (a temporary git worktree of REV) "
                         "in the same interleaved rounds")
    ap.add_argument("--rewrite-against", metavar="REV",
                    help="also time REV's rewrite throughput against this tree's, interleaved (part 2, locality)")
    args = ap.parse_args(argv)
    if args.rewrite_against and args.part not in (None, "2", "locality"):
        ap.error("--rewrite-against goes with part 2 or --part locality")
    if args.hook_against and args.part not in (None, "2"):
        ap.error("--hook-against is part 2's (the hook-cost case)")
    args.quick = args.quick or args.smoke
    size = "smoke" if args.smoke else "quick" if args.quick else "full"
    cfg = QUICK if args.quick else FULL
    start = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - start:6.1f}s] {msg}", file=sys.stderr, flush=True)

    common = {
        "virt_type": args.virt_type,
        "virt_type_note": ("part 2 runs in-process and starts no guest; the virt type only sets "
                           "type= of the generated placement domains"),
        "quick": args.quick,
        "size": size,
        "machine": machine(),
        **versions(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    records = []
    if args.part is None or args.part == "2":
        records += costs.rewrite_throughput(cfg["rewrite_runs"], cfg["rewrite_inner"], log)
        records += costs.placement(cfg["sizes"], cfg["placement_runs"], cfg["place_inner"], args.virt_type, log)
        records += hook_cost.run(args.quick, log, args.hook_against)  # FULL/QUICK sizes in bench/hook_cost.py
    if args.part in (None, "2", "map"):
        records += map_cost.run(size, args.virt_type, log)  # its SIZES in bench/map_cost.py
    if args.part in (None, "2", "locality"):
        records += locality_cost.placement(size, args.virt_type, log)  # its SIZES in bench/locality_cost.py
        records += locality_cost.retune(size, log)  # its ROUNDS in bench/locality_cost.py
        records += rewrite_steps.run(size, log)  # its ROUNDS in bench/rewrite_steps.py
        if args.rewrite_against:
            records += locality_cost.against(args.rewrite_against, size, log)
    part1, isolation, noise = {"ran": False}, {"ran": False}, {"ran": False}
    if args.part is None or args.part == "1":
        part1 = _part("part 1 (what a guest gains)", records, log, guests.Unavailable,
                      (guests.GuestError, guests.guestimage.BuildError),
                      lambda: guests.run(GUESTS[size], args.virt_type, log))
    if args.part in ISOLATION_PARTS:
        isolation = _part("host-isolation", records, log, host_isolation.Unavailable,
                          (host_isolation.IsolationError, guests.guestimage.BuildError),
                          lambda: host_isolation.run(size, log))  # its SIZES in bench/host_isolation.py
    if args.part in NOISE_PARTS:
        noise = _part("host-noise", records, log, host_noise.Unavailable,
                      (host_noise.NoiseError, host_isolation.IsolationError, guests.guestimage.BuildError),
                      lambda: host_noise.run(size, log))  # its SIZES in bench/host_noise.py
    queues = {"ran": False}
    if args.part in (None, "disk-queues"):
        queues = _part("disk-queues", records, log, disk_queues.Unavailable,
                       (disk_queues.DiskQueuesError, guests.GuestError, guests.guestimage.BuildError),
                       lambda: disk_queues.run(size, log))  # its SIZES in bench/disk_queues.py
    # how part 1 ran its tuned guests: the hook's setup and teardown (every part-1 record has it too)
    part1_hook = next((r["setup"]["hook"] for r in records if r["case"].startswith("guest-")
                       and "hook" in r.get("setup", {})), None)
    written = []
    for rec in records:
        # the case, variant and figures first, then the context every result carries
        written.append(write_result(args.out, {**{k: rec[k] for k in ("case", "variant")}, **common, **rec}))
    if args.cprofile:
        path = args.out / f"cprofile-plan-all-N{max(cfg['sizes'])}.txt"
        costs.profile_plan_all(max(cfg["sizes"]), args.virt_type, path)
        log(f"wrote {path}")
    summary = [{k: r.get(k) for k in ("case", "variant", "p50_ms", "p99_ms", "rewrites_per_s", "total_s")}
               for r in records]
    index = {"quick": args.quick, "size": size, "virt_type": args.virt_type, "elapsed_s": time.monotonic() - start,
             "files": [p.name for p in written], "summary": summary, "part1": part1, "part1_hook": part1_hook,
             "host_isolation": isolation, "host_noise": noise, "disk_queues": queues}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    for row in summary:
        figs = "  ".join(f"{k}={v:.3g}" for k, v in row.items() if isinstance(v, float))
        print(f"{row['case']:22} {row['variant']:22} {figs}")
    log(f"{len(written)} result files in {args.out}")
    if any(r["case"] == host_isolation.CASE for r in records):
        print(host_isolation.table([r for r in records if r["case"] == host_isolation.CASE]), end="")
    if any(r["case"] == host_noise.CASE for r in records):
        print(host_noise.table([r for r in records if r["case"] == host_noise.CASE]), end="")
    return 1 if any("failed" in part for part in (part1, isolation, noise, queues)) else 0


if __name__ == "__main__":
    sys.exit(main())
