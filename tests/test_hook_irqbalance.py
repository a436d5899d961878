"""The hook's irqbalance ban (vmtune/hoststate/kinds/irqbalance.py, issue 17): a running irqbalance
is told, over its control socket, to ban the isolated CPUs too, for exactly as long as they are
isolated, and gets its own ban back after the last lease; a restarted irqbalance is banned again;
without the socket, one warning.

A fake irqbalance (isotrees.FakeIrqbalance, in ``kinds.irqbalance.request``) on fixtures/isolation.py's
fake host; the real Debian irqbalance, started by the test, in test_hook_irqbalance_real.py.
"""

from __future__ import annotations

import pytest
from fixtures.isotrees import FakeIrqbalance, tree
from fixtures.hook import A, B, call, state

from vmtune.hoststate.kinds import irqbalance


@pytest.fixture
def fake_irqbalance(isolation_host_tree, monkeypatch) -> FakeIrqbalance:
    """A fake irqbalance on the fake host, answering the hook's requests."""
    monkeypatch.setattr(irqbalance, "request", FakeIrqbalance(isolation_host_tree))
    return irqbalance.request


def test_the_isolated_cpus_are_banned_while_held_and_its_own_ban_comes_back(isolation_host_tree, fake_irqbalance):
    """vm-a (CPU 2) and vm-b (CPU 3): irqbalance bans 2, then 2-3, then 2 again; after the last
    release it follows its own rules again (``settings cpus NULL``), and the host is as before."""
    before = tree(isolation_host_tree)
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert fake_irqbalance.banned == {2}
    assert call(B, "vm-b", "prepare", "begin") == 0
    assert fake_irqbalance.banned == {2, 3}
    record = next(r for k, r in state(isolation_host_tree)["isolation"]["records"].items() if k.startswith("irqbalance:"))
    assert record["before"] == "" and record["after"] == "2-3" and record["ident"]
    assert call(A, "vm-a", "release", "end") == 0
    assert fake_irqbalance.banned == {3}
    assert call(B, "vm-b", "release", "end") == 0
    assert fake_irqbalance.ui == "" and fake_irqbalance.calls[-1] == "settings cpus NULL"
    assert tree(isolation_host_tree) == before


def test_its_own_ban_is_kept_beside_the_isolated_cpus(isolation_host_tree, monkeypatch):
    """irqbalance started with IRQBALANCE_BANNED_CPULIST=1: while CPU 2 is isolated it bans 1-2 (the
    admin's CPU stays banned), and gets back exactly its own after."""
    fake = FakeIrqbalance(isolation_host_tree, own="1")
    monkeypatch.setattr(irqbalance, "request", fake)
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert fake.banned == {1, 2}
    assert call(A, "vm-a", "release", "end") == 0
    assert fake.banned == {1} and fake.ui == ""


def test_a_restarted_irqbalance_is_banned_again(isolation_host_tree, fake_irqbalance):
    """irqbalance restarts while vm-a runs (a new pid, its ban lost): the next call (vm-b's prepare)
    bans the isolated CPUs on the new one; the releases give it its own ban back."""
    before = tree(isolation_host_tree)
    assert call(A, "vm-a", "prepare", "begin") == 0
    fake_irqbalance.start(pid=fake_irqbalance.pid + 1)
    assert fake_irqbalance.banned == frozenset()
    assert call(B, "vm-b", "prepare", "begin") == 0
    assert fake_irqbalance.banned == {2, 3}
    call(A, "vm-a", "release", "end")
    call(B, "vm-b", "release", "end")
    assert fake_irqbalance.ui == ""
    after = tree(isolation_host_tree)
    assert {k for k in after if k not in before} == {k for k in after if f"/{fake_irqbalance.pid}/" in k or
                                                     k.endswith(f"irqbalance{fake_irqbalance.pid}.sock")}


def test_the_ban_is_the_hooks_while_it_holds_cpus(isolation_host_tree, fake_irqbalance):
    """Someone sets irqbalance's ban over its socket while vm-a runs (a ban shows only from its next
    cycle, so a value there cannot be told from one of the hook's own not applied yet): the next call
    sets the hook's again, and the last release gives irqbalance its own rules back."""
    assert call(A, "vm-a", "prepare", "begin") == 0
    fake_irqbalance.socket.write_text("0\n")
    assert call(B, "vm-b", "prepare", "begin") == 0
    assert fake_irqbalance.banned == {2, 3}
    call(B, "vm-b", "release", "end")
    call(A, "vm-a", "release", "end")
    assert fake_irqbalance.ui == ""


@pytest.mark.parametrize("cycles", ["none", "between prepares", "every call"])
def test_a_ban_applied_at_its_next_cycle_is_never_left_behind(isolation_host_tree, monkeypatch, cycles):
    """irqbalance applies a ban at its next cycle, and its ``setup`` answer shows the one before
    until then. Whether none, some or every call of vm-a's and vm-b's starts and stops falls between
    two of its cycles: after the last release, and its next cycle, it follows its own rules again."""
    fake = FakeIrqbalance(isolation_host_tree, lag=True)
    monkeypatch.setattr(irqbalance, "request", fake)
    before = tree(isolation_host_tree)
    for n, (xml, name, op) in enumerate([(A, "vm-a", "prepare"), (B, "vm-b", "prepare"), (B, "vm-b", "release"),
                                          (A, "vm-a", "release")]):
        assert call(xml, name, op, "begin" if op == "prepare" else "end") == 0
        if cycles == "every call" or (cycles == "between prepares" and n == 0):
            fake.tick()
    fake.tick()
    assert fake.ui == "" and fake.banned == frozenset()
    assert tree(isolation_host_tree) == before


def test_a_start_released_within_a_cycle_leaves_no_ban(isolation_host_tree, monkeypatch):
    """vm-a's start fails at once (libvirt releases it before irqbalance's next cycle): the ban sent
    at its prepare is taken back, not left to apply later."""
    fake = FakeIrqbalance(isolation_host_tree, lag=True)
    monkeypatch.setattr(irqbalance, "request", fake)
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert call(A, "vm-a", "release", "end") == 0
    fake.tick()
    assert fake.ui == ""


@pytest.mark.parametrize("why", ["silent", "off"])
def test_without_its_socket_one_warning_and_the_lease_works(isolation_host_tree, monkeypatch, capsys, why):
    """irqbalance answers nothing on its socket (not root, or a build without it), or the option is
    off: the lease is taken and isolated, the ban untouched, and one warning names
    IRQBALANCE_BANNED_CPULIST."""
    fake = FakeIrqbalance(isolation_host_tree, silent=why == "silent")
    monkeypatch.setattr(irqbalance, "request", fake)
    if why == "off":
        (isolation_host_tree / "vmtune.toml").write_text('reserved_cpus = "0"\n[hook]\nisolate_irqbalance = "off"\n')
    before = tree(isolation_host_tree)
    assert call(A, "vm-a", "prepare", "begin") == 0
    err = capsys.readouterr().err
    assert err.count("IRQBALANCE_BANNED_CPULIST") == 1 and f"irqbalance is running (pid {fake.pid})" in err, err
    assert fake.ui == "" and not [c for c in fake.calls if c.startswith("settings")]
    assert call(A, "vm-a", "release", "end") == 0
    assert tree(isolation_host_tree) == before


def test_reap_bans_a_restarted_irqbalance_again(isolation_host_tree, fake_irqbalance, capsys):
    """irqbalance restarts while vm-a runs; no domain starts or stops: ``vmtune hook reap`` finds the
    ban gone and sets it again."""
    from vmtune import cli

    assert call(A, "vm-a", "prepare", "begin") == 0
    fake_irqbalance.start(pid=fake_irqbalance.pid + 1)
    capsys.readouterr()
    assert cli.main(["hook", "reap"]) == 0
    assert "completed the isolation" in capsys.readouterr().out
    assert fake_irqbalance.banned == {2}
    assert call(A, "vm-a", "release", "end") == 0
    assert fake_irqbalance.ui == ""


def test_no_irqbalance_no_word(isolation_host_tree, capsys):
    """No irqbalance on the host: nothing about it in the log."""
    assert call(A, "vm-a", "prepare", "begin") == 0
    assert "irqbalance" not in capsys.readouterr().err
    assert call(A, "vm-a", "release", "end") == 0
