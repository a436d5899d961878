"""``vmtune doctor --prometheus FILE``: node_exporter textfile metrics, read back with prometheus_client's
own parser, on the captured trees of doctortrees.py."""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

from fixtures import doctortrees as trees
import pytest
from prometheus_client.parser import text_string_to_metric_families

from vmtune import cli
from vmtune.placement.audit import KINDS
from vmtune.doctor import diagnose, prometheus

# No /etc/vmtune, $VMTUNE_* or user profiles of the machine (doctortrees.py).
pytestmark = pytest.mark.usefixtures("no_machine_vmtune")


def samples(text: str) -> dict[str, dict[tuple, float]]:
    """metric name -> {sorted label items: value}, through prometheus_client's parser."""
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family.name
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def value(found: dict, metric: str, **labels) -> float:
    return found[metric][tuple(sorted((k, str(v)) for k, v in labels.items()))]


def cli_run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _task(tree, pid: int, comm: str, cpus: str) -> None:
    stat = f"{pid} ({comm}) S 1 1 1 0 -1 0 " + " ".join(["0"] * 12) + " 4242 0 0"
    tree.write(f"proc/{pid}/cgroup", "0::/")
    tree.write(f"proc/{pid}/task/{pid}/stat", stat)
    tree.write(f"proc/{pid}/task/{pid}/status", f"Name:\t{comm}\nCpus_allowed_list:\t{cpus}")


def test_healthy_host_metrics(healthy_host_tree):
    """The healthy tree: every CPU on performance, C6 disabled and C1E not, no lease, no problem, doctor ok."""
    found = samples(prometheus.text(diagnose(healthy_host_tree.roots(), measure=False)))
    assert value(found, "vmtune_doctor_ok") == 1
    assert set(found["vmtune_cpufreq_governor_info"]) == {
        (("cpu", str(c)), ("governor", "performance")) for c in healthy_host_tree.cpus}
    assert value(found, "vmtune_cpuidle_state_disabled", cpu=5, latency_us=133, name="C6", state="state3") == 1
    assert value(found, "vmtune_cpuidle_state_disabled", cpu=5, latency_us=10, name="C1E", state="state2") == 0
    assert value(found, "vmtune_hook_leases") == 0 and value(found, "vmtune_hook_state_readable") == 1
    assert value(found, "vmtune_isolation_stray_tasks") == 0 and "vmtune_isolation_cpu" not in found
    assert value(found, "vmtune_hugepages_free", node=1, page_kib=2048) == 1024
    assert value(found, "vmtune_plan_domains") == 0
    assert {dict(k)["kind"] for k in found["vmtune_plan_problems"]} == set(KINDS)
    assert not any(found["vmtune_plan_problems"].values())
    assert value(found, "vmtune_doctor_findings", area="cpufreq", level="FAIL") == 0


def test_problem_host_metrics(healthy_host_tree):
    """A tree with each problem: the metrics say which CPUs, states, leases, strays, pages and kinds."""
    trees.governors(healthy_host_tree, "powersave", cpus=[2, 6])
    trees.deep_cstates(healthy_host_tree)
    trees.hugepages(healthy_host_tree, 0, total=600, free=100)
    db1 = trees.domain("db1", [1, 5], mib=1024)  # 512 x 2 MiB on node 0, held
    uuid = db1.split("<uuid>", 1)[1].split("</uuid>", 1)[0]  # a lease is matched by its domain's UUID
    trees.running(healthy_host_tree, db1)
    trees.running(healthy_host_tree, trees.domain("db2", [1, 5], hugepage_kib=None), state="paused")
    trees.hook_state(healthy_host_tree, {uuid: {"name": "db1", "profile": "latency", "cpus": "1,5", "since": 1.0}}, [])
    _task(healthy_host_tree, 100, "backup", "0-7")
    _task(healthy_host_tree, 101, "pinned", "1")
    healthy_host_tree.write("proc/irq/30/smp_affinity_list", "0-7")
    report = diagnose(healthy_host_tree.roots(), measure=False)
    found = samples(prometheus.text(report))
    assert value(found, "vmtune_doctor_ok") == 0
    assert value(found, "vmtune_doctor_findings", area="domains", level="FAIL") == 1
    assert value(found, "vmtune_cpufreq_governor_info", cpu=6, governor="powersave") == 1
    assert value(found, "vmtune_cpufreq_governor_info", cpu=1, governor="performance") == 1
    assert value(found, "vmtune_cpuidle_state_disabled", cpu=0, latency_us=133, name="C6", state="state3") == 0
    assert value(found, "vmtune_hook_leases") == 1
    assert value(found, "vmtune_hook_lease_info", cpus="1,5", domain="db1", profile="latency", uuid=uuid) == 1
    assert set(found["vmtune_isolation_cpu"]) == {(("cpu", "1"),), (("cpu", "5"),)}
    assert value(found, "vmtune_isolation_stray_tasks") == 1 and value(found, "vmtune_isolation_stray_irqs") == 1
    assert value(found, "vmtune_hugepages_pool_pages", node=0, page_kib=2048) == 600
    assert value(found, "vmtune_hugepages_free", node=0, page_kib=2048) == 100
    assert value(found, "vmtune_hugepages_needed", node=0, page_kib=2048, state="running") == 512
    assert value(found, "vmtune_hugepages_needed", node=0, page_kib=2048, state="stopped") == 0
    assert value(found, "vmtune_plan_domains") == 2
    assert value(found, "vmtune_plan_problems", kind="cpu-overlap") == 1
    kinds = Counter(p.kind for p in report.context.audit.problems)
    assert {kind: value(found, "vmtune_plan_problems", kind=kind) for kind in KINDS} == {k: kinds[k] for k in KINDS}


def test_damaged_state_is_a_metric(healthy_host_tree):
    """A damaged hook state file is vmtune_hook_state_readable 0, not a crash and not 0 leases."""
    healthy_host_tree.write("run/vmtune/state.json", "{not json")
    found = samples(prometheus.text(diagnose(healthy_host_tree.roots(), measure=False)))
    assert value(found, "vmtune_hook_state_readable") == 0
    assert "vmtune_hook_leases" not in found


def test_cli_writes_the_file_atomically(healthy_host_tree, tmp_path, capsys, monkeypatch):
    """The CLI writes the file mode 0644 and still prints the report; a failed run leaves the old file
    whole and no temporary file beside it."""
    out = tmp_path / "textfile" / "vmtune.prom"
    out.parent.mkdir()
    rc, text, _ = cli_run(capsys, "doctor", *healthy_host_tree.argv(), "--no-measure", "--prometheus", out)
    assert rc == 0 and "doctor:" in text
    assert out.stat().st_mode & 0o777 == 0o644
    first = out.read_text()
    assert value(samples(first), "vmtune_doctor_ok") == 1

    def broken(report):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(prometheus.Metrics, "text", lambda self: "half a file" if broken(None) else "")
    with pytest.raises(OSError):
        cli.main(["doctor", *healthy_host_tree.argv(), "--no-measure", "--prometheus", str(out)])
    assert out.read_text() == first
    assert sorted(p.name for p in out.parent.iterdir()) == ["vmtune.prom"]


def test_unwritable_target_is_one_line(healthy_host_tree, tmp_path, capsys):
    """A folder that does not exist: one `vmtune: error:` line, exit 1."""
    rc, _, err = cli_run(capsys, "doctor", *healthy_host_tree.argv(), "--no-measure", "--prometheus", tmp_path / "no" / "x.prom")
    assert rc == 1 and err.startswith("vmtune: error: cannot write ") and err.count("\n") == 1, err


def test_without_prometheus_client(healthy_host_tree, tmp_path, capsys, monkeypatch):
    """prometheus_client missing: one line naming the extra, exit 4, no checks run and no file."""
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    ran = []
    monkeypatch.setattr("vmtune.doctor.diagnose", lambda *a, **k: ran.append(1))
    rc, out, err = cli_run(capsys, "doctor", *healthy_host_tree.argv(), "--no-measure", "--prometheus", tmp_path / "x.prom")
    assert rc == 4 and out == "" and not ran
    assert err == "vmtune: error: prometheus_client is not installed: pip install vmtune[prometheus]\n"
    assert not (tmp_path / "x.prom").exists()


def test_doctor_without_prometheus_does_not_import_it(healthy_host_tree, capsys):
    """vmtune's core does not need prometheus_client: a doctor run without --prometheus never imports it."""
    import subprocess

    code = ("import sys; from vmtune import cli; cli.main(['doctor', *sys.argv[1:], '--no-measure']); "
            "print('prometheus_client' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code, *healthy_host_tree.argv()], capture_output=True, text=True, check=False)
    assert proc.stdout.strip().splitlines()[-1] == "False", proc.stdout + proc.stderr


SERIES_SUFFIXES = ("_total", "_count", "_sum", "_bucket", "_created")


def test_no_gauge_is_named_like_a_counter(healthy_host_tree):
    """Prometheus' naming rules (promtool: 'non-counter metrics should not have "_total" suffix'): every
    vmtune metric is a gauge, so none ends as a counter's or a histogram's series does: not the ones written
    (the problem tree has every metric), not the ones the module's docstring and docs/fleets.md's table name."""
    trees.hugepages(healthy_host_tree, 0, total=600, free=100)
    written = set(samples(prometheus.text(diagnose(healthy_host_tree.roots(), measure=False))))
    fleets = (Path(__file__).resolve().parents[1] / "docs" / "fleets.md").read_text()
    section = fleets.split("\n## Monitoring with Prometheus\n", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"\bvmtune_[a-z_]+", prometheus.__doc__ + section.split("--prometheus FILE", 1)[1]))
    assert {"vmtune_hugepages_pool_pages", "vmtune_hugepages_free"} <= written & named, sorted(written)
    assert not [n for n in written | named if n.endswith(SERIES_SUFFIXES)], sorted(written | named)
    assert written <= named | {"vmtune_isolation_stray_irqs"}, sorted(written - named)
