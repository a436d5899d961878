"""The rewrite's warnings (vmtune/driver.py, vmtune/placement/managers.py): what the user must know (issue 32,
item 6): live migration after host-passthrough, a manager that regenerates the domain, a hybrid host
whose core kinds its description does not say."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import vmtune
from conftest import EXAMPLES
from fixtures.hosttrees import caps_view, hosts
from fixtures.strategies import domains
from vmtune import cpuset
from vmtune.errors import DoesNotFit

# half the profile's examples (HYPOTHESIS_PROFILE=thorough runs more): the rewrites here are whole ones
FEWER = settings(max_examples=max(20, settings.default.max_examples // 2),
                 suppress_health_check=[HealthCheck.filter_too_much])

HOST = vmtune.Host.from_capabilities((EXAMPLES / "hosts" / "2node-smt.xml").read_bytes())
BASE = ("<domain type='kvm'><name>w</name>{meta}<memory unit='GiB'>2</memory><vcpu>2</vcpu>"
        "<os><type arch='x86_64'>hvm</type></os>{cpu}</domain>")


@pytest.mark.parametrize("cpu,warned", [
    ("<cpu mode='host-model'/>", True),
    ("<cpu mode='custom' match='exact'><model>Skylake-Server</model></cpu>", True),
    ("<cpu><model>EPYC</model></cpu>", True),
    ("<cpu mode='host-passthrough'/>", False),
    ("", False),
    ("<cpu><topology sockets='1' cores='2' threads='1'/></cpu>", False),
])
def test_host_passthrough_says_what_it_costs_live_migration(cpu, warned):
    result = vmtune.rewrite(BASE.format(meta="", cpu=cpu), HOST, "latency")
    said = [w for w in result.warnings if "live migration then needs hosts with identical CPUs" in w]
    assert bool(said) == warned
    if warned:
        assert 'cpu_mode = "keep"' in said[0]


def test_cpu_mode_keep_keeps_host_model(tmp_path):
    (tmp_path / "migrating.toml").write_text('inherit = "latency"\n[cpu]\nmode = "keep"\n')
    cfg = vmtune.Config(profiles_dir=str(tmp_path))
    result = vmtune.rewrite(BASE.format(meta="", cpu="<cpu mode='host-model'/>"), HOST, "migrating", config=cfg)
    assert "mode=\"host-model\"" in result.xml.replace("'", '"')
    assert not any("live migration" in w for w in result.warnings)


MANAGED = {
    "OpenStack Nova": "<nova:instance xmlns:nova='http://openstack.org/xmlns/libvirt/nova/1.1'>"
                      "<nova:name>vm</nova:name></nova:instance>",
    "oVirt": "<ovirt-vm:vm xmlns:ovirt-vm='http://ovirt.org/vm/1.0'><ovirt-vm:clusterVersion>4.5"
             "</ovirt-vm:clusterVersion></ovirt-vm:vm>",
    "KubeVirt": "<kubevirt xmlns='http://kubevirt.io'><uid>f7c4</uid></kubevirt>",
    "OpenNebula": "<one:vm xmlns:one='http://opennebula.org/xmlns/libvirt/1.0'><one:name>x</one:name></one:vm>",
}


@pytest.mark.parametrize("manager", sorted(MANAGED))
@pytest.mark.parametrize("profile", ("balanced", "latency"))
def test_a_managed_domain_is_tuned_with_word_that_its_manager_undoes_it(manager, profile):
    xml = BASE.format(meta=f"<metadata>{MANAGED[manager]}</metadata>", cpu="")
    result = vmtune.rewrite(xml, HOST, profile)
    said = [w for w in result.warnings if w.startswith(f"managed by {manager} ")]
    assert len(said) == 1 and "undoes the tuning; set it in" in said[0]


def test_other_metadata_is_no_manager():
    xml = BASE.format(meta="<metadata><libosinfo:libosinfo xmlns:libosinfo='http://libosinfo.org/xmlns/libvirt/"
                           "domain/1.0'><libosinfo:os id='http://fedoraproject.org/fedora/40'/></libosinfo:libosinfo>"
                           "<app xmlns='https://example.com/kubevirt.io'/></metadata>", cpu="")
    assert not any(w.startswith("managed by") for w in vmtune.rewrite(xml, HOST, "latency").warnings)


@FEWER
@given(domains(max_vcpus=4, virt_types=("kvm",)),
       hosts(arches=("x86_64",), hybrid=True, max_cores=4, isolated=False, offline=False), st.sampled_from(("latency", "balanced")))
def test_a_hybrid_host_without_core_kinds_is_said(xml, host, profile):
    """A hybrid host as capabilities show it (no kinds) warns a dedicated rewrite; as sysfs shows it
    (kinds known), or given the efficiency cores in the config, it does not."""
    seen = caps_view(host)
    try:
        blind = vmtune.rewrite(xml, seen, profile)
        known = vmtune.rewrite(xml, host, profile)
        told = vmtune.rewrite(xml, seen, profile, config=vmtune.Config(
            efficiency_cpus=frozenset(c for c in host.cpus if host.efficient(c))))
    except DoesNotFit:
        assume(False)
    def said(r):
        return any("cores of uneven thread counts" in w for w in r.warnings)
    uneven = len({len(c.siblings) for c in host.cpus.values()}) > 1
    assert said(blind) == (uneven and profile == "latency")
    assert not said(known) and not said(told)
    if host.hybrid:
        assert told.placement["vcpupins"] == known.placement["vcpupins"]


def test_efficiency_cpus_in_the_config_are_read(tmp_path):
    (tmp_path / "vmtune.toml").write_text('efficiency_cpus = "16-23"\n')
    cfg = vmtune.config.load(str(tmp_path / "vmtune.toml"))
    assert cfg.efficiency_cpus == cpuset.parse("16-23")
    (tmp_path / "bad.toml").write_text('efficiency_cpus = "x"\n')
    with pytest.raises(vmtune.errors.InvalidInput, match="efficiency_cpus"):
        vmtune.config.load(str(tmp_path / "bad.toml"))
