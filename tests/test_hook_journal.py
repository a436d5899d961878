"""The hook's journal (vmtune/hoststate/engine.py, statedir.py): the hook commits the records of
what it will change before it changes anything.

A hook killed half-way through tuning the host (``os._exit`` in a forked hook, no cleanup, like
SIGKILL) leaves a journal in the state file; the next call settles it against sysfs, and the
release restores exactly what was there. A Python error half-way undoes the call's changes.
"""

from __future__ import annotations

import json

import pytest
from fixtures.killpoints import KILLED, killed_at
from fixtures.hook import A, B, CPU, UUID_A, call, snapshot, state, value

from vmtune.hoststate.kinds import base

HOST_WRITES = 12  # the fake host of test_hook: 3 EPP + 4 governors + 4 deep C-states + KSM


def killed_after(writes: int, argv: list[str], xml: str) -> int:
    """Killed before its sysfs write number ``writes`` (0: before the first)."""
    return killed_at(writes, argv, xml, [(base, "write_file")])


def pending(records) -> list[str]:
    return [r["path"] for r in records or [] if r.get("pending")]


@pytest.mark.parametrize("writes", [0, 1, 5, HOST_WRITES - 1])
def test_killed_while_tuning_then_released(fake_host_tree, writes):
    """Killed after ``writes`` sysfs writes: the lease and every intended record are on disk; the
    release restores exactly (unwritten knobs are recognised and skipped)."""
    sysfs = fake_host_tree / "sys"
    before = snapshot(sysfs)
    assert killed_after(writes, ["vm-a", "prepare", "begin", "-"], A) == KILLED
    saved = state(fake_host_tree)
    assert list(saved["leases"]) == [UUID_A]
    assert len(pending(saved["baseline"])) == HOST_WRITES
    changed = sum(1 for k, v in snapshot(sysfs).items() if before[k] != v)
    assert changed == writes
    assert call(A, "vm-a", "release", "end", "failed") == 0
    assert snapshot(sysfs) == before
    assert state(fake_host_tree) == {"version": 2, "leases": {}, "baseline": None, "isolation": None, "unrestored": []}


def test_killed_then_reconnected_settles_the_journal(fake_host_tree):
    """A later call (here reconnect) settles the journal (records for values never written go, the
    written ones stay as ordinary records) and completes the tuning: verify, never assume. A second
    domain and both releases end with the host as before."""
    sysfs = fake_host_tree / "sys"
    before = snapshot(sysfs)
    assert killed_after(5, ["vm-a", "prepare", "begin", "-"], A) == KILLED
    assert call(A, "vm-a", "reconnect", "begin") == 0  # settles, then completes what was not written
    baseline = state(fake_host_tree)["baseline"]
    assert pending(baseline) == [] and len(baseline) == HOST_WRITES
    tuned = snapshot(sysfs)
    assert call(B, "vm-b", "prepare", "begin") == 0  # not the first: the host is already as it should be
    assert snapshot(sysfs) == tuned
    call(A, "vm-a", "release", "end")
    call(B, "vm-b", "release", "end")
    assert snapshot(sysfs) == before


def test_killed_while_restoring_then_released_again(fake_host_tree, capsys):
    """A release killed half-way keeps the lease and baseline; the next release finishes the job,
    quietly: values already back at their original are no drift."""
    sysfs = fake_host_tree / "sys"
    before = snapshot(sysfs)
    call(A, "vm-a", "prepare", "begin")
    assert killed_after(4, ["vm-a", "release", "end", "-"], A) == KILLED
    assert list(state(fake_host_tree)["leases"]) == [UUID_A]
    capsys.readouterr()
    assert call(A, "vm-a", "release", "end") == 0
    assert snapshot(sysfs) == before
    assert "left alone" not in capsys.readouterr().err


def test_the_journal_is_on_disk_before_the_first_write(fake_host_tree, monkeypatch):
    """At every sysfs write, the state file already holds a record for that path."""
    real = base.write_file
    seen = []

    def write(root, path, val):
        on_disk = json.loads((fake_host_tree / "state" / "state.json").read_text())
        seen.append(path in [r["path"] for r in on_disk["baseline"] or []])
        real(root, path, val)

    monkeypatch.setattr(base, "write_file", write)
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert len(seen) == HOST_WRITES and all(seen)
    assert pending(state(fake_host_tree)["baseline"]) == []  # the final commit has the real records


def test_an_error_half_way_undoes_the_tuning(fake_host_tree, monkeypatch, capsys):
    """A write that raises (not an OSError: a bug) after 5 writes: exit 1, host and state as before."""
    sysfs = fake_host_tree / "sys"
    before = snapshot(sysfs)
    real = base.write_file
    done = [0]

    def write(root, path, val):
        if done[0] == 5:
            done[0] += 1
            raise RuntimeError("boom")
        done[0] += 1
        real(root, path, val)

    monkeypatch.setattr(base, "write_file", write)
    assert call(A, "vm-a", "prepare", "begin") == 1
    assert "boom" in capsys.readouterr().err
    assert snapshot(sysfs) == before
    assert state(fake_host_tree)["leases"] == {} and state(fake_host_tree)["baseline"] is None


def test_an_error_half_way_in_pinned_scope_undoes_the_cstates(fake_host_tree, monkeypatch):
    (fake_host_tree / "vmtune.toml").write_text('[hook]\ncstate_scope = "pinned"\n')
    sysfs = fake_host_tree / "sys"
    call(A, "vm-a", "prepare", "begin")
    tuned = snapshot(sysfs)
    saved = state(fake_host_tree)
    real = base.write_file

    def write(root, path, val):
        if "cpuidle" in path:
            real(root, path, val)
            raise RuntimeError("boom")
        real(root, path, val)

    monkeypatch.setattr(base, "write_file", write)
    assert call(B, "vm-b", "prepare", "begin") == 1
    monkeypatch.setattr(base, "write_file", real)
    assert snapshot(sysfs) == tuned
    assert state(fake_host_tree) == saved
    assert value(sysfs, f"{CPU}/cpu3/cpuidle/state3/disable") == "0"


def test_killed_in_pinned_scope_then_reconnected_and_released(fake_host_tree):
    """Scope pinned, the second lease killed after one of its two C-state writes: reconnect settles
    its records and finishes the job (CPU 1 too); both releases end with the host as before."""
    (fake_host_tree / "vmtune.toml").write_text('[hook]\ncstate_scope = "pinned"\n')
    sysfs = fake_host_tree / "sys"
    before = snapshot(sysfs)
    call(A, "vm-a", "prepare", "begin")
    b = B.replace("cpuset='3'", "cpuset='0-1'")
    assert killed_after(1, ["vm-b", "prepare", "begin", "-"], b) == KILLED
    (lease,) = [v for v in state(fake_host_tree)["leases"].values() if v["name"] == "vm-b"]
    assert len(pending(lease["cstates"])) == 2
    assert call(b, "vm-b", "reconnect", "begin") == 0
    (lease,) = [v for v in state(fake_host_tree)["leases"].values() if v["name"] == "vm-b"]
    assert [r["path"] for r in lease["cstates"]] == [f"{CPU}/cpu{c}/cpuidle/state3/disable" for c in (0, 1)]
    assert pending(lease["cstates"]) == []
    assert value(sysfs, f"{CPU}/cpu1/cpuidle/state3/disable") == "1"
    call(b, "vm-b", "release", "end")
    call(A, "vm-a", "release", "end")
    assert snapshot(sysfs) == before
