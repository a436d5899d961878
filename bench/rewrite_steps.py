"""Where a rewrite's time goes (issue 33): each step of this tree's rewrite, and the rewrite without
the record and the byte-keeping writer.

- ``rewrite-steps``: every corpus and ``examples/*.xml`` domain placed under a profile on
  ``examples/hosts/2node-smt.xml``, rewritten round after round, each step's time taken by a wrapper
  around it (inclusive: the placement is inside the preparation): µs per rewrite, the median over
  the rounds. A wrapper costs about a microsecond a call; the steps are called once or a few times
  a rewrite.
- ``rewrite-bound``: the same rewrites as they are, with the record off (no snapshot, diff or
  record: the writer then writes each changed unit without the record's texts), with the whole
  document written by lxml (``style.serialize``, what ed880f8 wrote) instead of the writer that
  keeps every byte, and with both: what everything else costs. The variants alternate within each
  round; a variant's figure is its ms per rewrite, the median over the rounds.

Measurement only: the stand-ins write no output anyone reads (the record off gives no record).
"""

from __future__ import annotations

import gc
import importlib
import time
from contextlib import contextmanager

import vmtune

from .common import CORPUS, EXAMPLES, ms_figures, summarize

ROUNDS = {"full": 20, "quick": 5, "smoke": 2}
PROFILES = ("latency", "realtime")
# (label, module, attribute): each wrapped where the rewrite looks it up
STEPS = (
    ("prepare", "vmtune.driver", "_prepare"),
    ("parse", "vmtune.xml.xmlsafe", "parse"),
    ("value checks", "vmtune.driver", "check_domain"),
    ("profile", "vmtune.profiles", "load"),
    ("intent", "vmtune.placement.intent", "read"),
    ("placement", "vmtune.placement.request", "place"),
    ("guest OS", "vmtune.xml.guestos", "reading"),
    ("passes and edits", "vmtune.driver", "run_passes"),
    ("record: snapshot", "vmtune.record.undo", "snapshot"),
    ("record: diff", "vmtune.record.undo", "diff"),
    ("record: write", "vmtune.record.undo", "write"),
    ("writer", "vmtune.driver", "Tuned.text"),
)
VARIANTS = ("as-is", "no-record", "no-writer", "neither")


def _corpus(profile: str) -> tuple[vmtune.Host, list[bytes]]:
    host = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
    xmls = []
    for path in sorted((CORPUS / "domains").glob("*.xml")) + sorted(EXAMPLES.glob("*.xml")):
        try:
            vmtune.rewrite(path.read_bytes(), host, profile)
        except vmtune.VmtuneError:
            continue
        xmls.append(path.read_bytes())
    return host, xmls


def _owner(module: str, attr: str):
    obj = importlib.import_module(module)
    *outer, name = attr.split(".")
    for part in outer:
        obj = getattr(obj, part)
    return obj, name


@contextmanager
def _swapped(changes: list[tuple[object, str, object]]):
    """Each (owner, attribute, value) of ``changes`` set for the block, and put back after."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in changes]
    for owner, name, value in changes:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, inner in reversed(saved):
            setattr(owner, name, inner)


def _timed(spent: dict[str, float]):
    """Every step of ``STEPS`` wrapped: its seconds added to ``spent`` under its label."""
    changes = []
    for label, module, attr in STEPS:
        owner, name = _owner(module, attr)

        def wrapper(*args, _inner=getattr(owner, name), _label=label, **kwargs):
            t0 = time.perf_counter()
            try:
                return _inner(*args, **kwargs)
            finally:
                spent[_label] = spent.get(_label, 0.0) + time.perf_counter() - t0
        changes.append((owner, name, wrapper))
    return _swapped(changes)


def _variant(which: str):
    """The rewrite as ``which`` of ``VARIANTS`` says (module attributes swapped, put back after)."""
    from vmtune import driver
    from vmtune.record import undo
    from vmtune.xml.style import serialize

    changes = []
    if which in ("no-record", "neither"):
        changes.append((undo, "snapshot", lambda root, source=None: None))  # tune() then makes no record
    if which in ("no-writer", "neither"):
        changes.append((driver.Tuned, "text", lambda self: serialize(self.root)))
    return _swapped(changes)


def run(size: str, log) -> list[dict]:
    records = []
    for profile in PROFILES:
        host, xmls = _corpus(profile)
        records += [_steps(profile, host, xmls, ROUNDS[size], log), *_bound(profile, host, xmls, ROUNDS[size], log)]
    return records


def _rewrite_all(host, xmls: list[bytes], profile: str) -> dict:
    """One round: each rewrite timed; its p50, p99 and mean ms."""
    gc.collect()
    times = []
    for xml in xmls:
        t0 = time.perf_counter()
        vmtune.rewrite(xml, host, profile)
        times.append(time.perf_counter() - t0)
    return ms_figures(times)


def _steps(profile: str, host, xmls: list[bytes], rounds: int, log) -> dict:
    per_round = []
    for r in range(rounds):
        spent: dict[str, float] = {}
        with _timed(spent):
            figures = _rewrite_all(host, xmls, profile)
        per_round.append({**figures, **{label: spent.get(label, 0.0) / len(xmls) * 1e6 for label, *_ in STEPS}})
        log(f"rewrite-steps {profile}: round {r + 1}/{rounds}")
    s = summarize(per_round, ("p50_ms", "p99_ms", "mean_ms", *(label for label, *_ in STEPS)))
    return {
        "case": "rewrite-steps", "variant": profile,
        "description": "µs per rewrite of each step (inclusive, each wrapped), the median over the rounds; "
                       "p50/p99/mean: ms per rewrite, the wrappers' cost included",
        "domains": len(xmls), "host": "2node-smt", "runs": rounds,
        "steps_us": {label: round(s[label]["median"], 1) for label, *_ in STEPS},
        "p50_ms": s["p50_ms"]["median"], "p99_ms": s["p99_ms"]["median"], "mean_ms": s["mean_ms"]["median"],
        "spread": s, "per_run": per_round,
    }


def _bound(profile: str, host, xmls: list[bytes], rounds: int, log) -> list[dict]:
    took: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for r in range(rounds):
        for which in (VARIANTS if r % 2 == 0 else VARIANTS[::-1]):
            with _variant(which):
                took[which].append(_rewrite_all(host, xmls, profile))
        log(f"rewrite-bound {profile}: round {r + 1}/{rounds}")
    out = []
    for which in VARIANTS:
        s = summarize(took[which], ("p50_ms", "p99_ms", "mean_ms"))
        out.append({
            "case": "rewrite-bound", "variant": f"{profile} {which}",
            "description": "ms per rewrite of the corpus on 2node-smt: as-is, the record off, lxml's whole document "
                           "instead of the byte-keeping writer, or both; mean: the median over the rounds of each "
                           "round's mean",
            "domains": len(xmls), "host": "2node-smt", "runs": rounds,
            "p50_ms": s["p50_ms"]["median"], "p99_ms": s["p99_ms"]["median"], "mean_ms": s["mean_ms"]["median"],
            "spread": s, "per_run": took[which],
        })
    return out
