#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: vmtune developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: domain
short_description: Tune, untag or revert one libvirt domain with vmtune
description:
  - C(state=tuned) runs C(vmtune apply -- NAME) (with C(--profile) and C(--live) as asked, before the C(--)),
    which rewrites the domain's persistent XML for this host and defines it. The profile goes into the domain's
    tag. The name always comes after C(--), so a domain named C(--all) is that domain.
  - C(state=untagged) runs C(vmtune untag -- NAME); C(state=reverted) runs C(vmtune revert -- NAME), which defines the
    XML the domain had before vmtune's first apply.
  - The task is C(changed) only when the domain's XML changed (or, with I(live=true), its running threads moved).
    A second run with the same options reports no change.
  - Check mode runs C(vmtune apply --dry-run) (C(untag --dry-run), C(revert --dry-run)) and returns the diff;
    diff mode gives the XML before and after.
  - The module reads only C(vmtune ... --json); an error is vmtune's one-line message. A domain that does not
    fit fails the task, and nothing is defined.
author:
  - vmtune developers (@vmtune)
options:
  name:
    description: The libvirt domain's name.
    type: str
    required: true
  profile:
    description:
      - The profile to tune with (C(vmtune profiles) lists them). Default is the domain's tag, else C(balanced).
      - Only for I(state=tuned).
    type: str
  state:
    description: What the domain should be.
    type: str
    choices: [tuned, untagged, reverted]
    default: tuned
  live:
    description:
      - Also move a running domain's vCPUs, emulator and iothreads onto the new pins now (C(--live)).
        The memory binding, hugepages and devices change at its next boot.
    type: bool
    default: false
  force_virtio:
    description: Move every disk and NIC to virtio, the boot disk too, whatever the guest OS (C(--force-virtio)).
    type: bool
    default: false
  connect:
    description: The libvirt URI.
    type: str
    default: qemu:///system
extends_documentation_fragment:
  - vmtune.kvm.common
attributes:
  check_mode:
    description: Check mode runs the dry run of the same command and says what would change.
    support: full
  diff_mode:
    description: Diff mode gives the domain's XML before and after.
    support: full
notes:
  - The XML in diff output is libvirt's secure XML (vmtune keeps it whole for C(revert)); graphics passwords
    are shown as C(********), in the diff, in I(unified_diff) and in I(vmtune) alike.
"""

EXAMPLES = r"""
- name: Tune db1 as a latency domain, moving its running threads now
  vmtune.kvm.domain:
    name: db1
    profile: latency
    live: true

- name: Give web1 back the XML it had before vmtune
  vmtune.kvm.domain:
    name: web1
    state: reverted
"""

RETURN = r"""
profile:
  description: The profile the domain was tuned with (I(state=tuned)).
  returned: state is tuned
  type: str
  sample: latency
changes:
  description: One entry per change vmtune made, each with its element, before, after and reason.
  returned: state is tuned
  type: list
  elements: dict
placement:
  description: The nodes, vCPU pins, guest cells, emulator CPUs and hugepage size vmtune chose.
  returned: state is tuned
  type: dict
live:
  description: What C(--live) moved (vCPUs, emulator, iothreads), or null.
  returned: state is tuned
  type: dict
unified_diff:
  description: The unified diff of the persistent XML that the task makes (or, in check mode, would make).
  returned: state is tuned
  type: str
previous:
  description: The profile the domain was tagged with before (I(state=untagged)).
  returned: state is untagged
  type: str
vmtune:
  description: vmtune's JSON for the domain, as it printed it.
  returned: always
  type: dict
"""

import difflib

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vmtune.kvm.plugins.module_utils.vmtune import COMMON_ARGS, Vmtune, redact_all


def _unified(name, before, after):
    return "".join(difflib.unified_diff((before or "").splitlines(True), (after or "").splitlines(True),
                                        "%s (libvirt)" % name, "%s (vmtune)" % name))


def _not_live(tool, name):
    """Whether ``vmtune plan`` says the running domain ``name`` is not where its definition pins it."""
    rc, plan = tool.run("plan", "--connect", tool.module.params["connect"], ok=(0, 1))
    return any(p["kind"] == "not-live" and name in p["domains"] for p in plan.get("problems", []))


def tuned(module, tool):
    p = module.params
    args = ["--connect", p["connect"]]
    args += ["--profile", p["profile"]] if p["profile"] else []
    args += ["--live"] if p["live"] else []
    args += ["--force-virtio"] if p["force_virtio"] else []
    args += ["--dry-run"] if module.check_mode else []
    rc, data = tool.run("apply", *args, names=[p["name"]])
    (row,) = redact_all(data)["domains"]
    if module.check_mode:
        moved = p["live"] and row["state"] != "shut off" and _not_live(tool, row["name"])
        changed = row["changed"] or moved
    else:
        changed = row["defined"] or row["live"] is not None
    result = dict(changed=changed, profile=row["profile"], changes=row["changes"], placement=row["placement"],
                  live=row["live"], unified_diff=_unified(row["name"], row["before"], row["xml"]) if row["changed"]
                  else "", vmtune=row)
    if row["changed"] and module._diff:
        result["diff"] = dict(before=row["before"], after=row["xml"],
                              before_header="%s (libvirt)" % row["name"], after_header="%s (vmtune)" % row["name"])
    if changed:
        for warning in row["warnings"]:
            module.warn("%s: %s" % (row["name"], warning))
    return result


def untagged(module, tool):
    p = module.params
    args = ["--connect", p["connect"]] + (["--dry-run"] if module.check_mode else [])
    rc, data = tool.run("untag", *args, names=[p["name"]])
    data = redact_all(data)
    changed = data["previous"] is not None
    result = dict(changed=changed, previous=data["previous"], vmtune=data)
    if changed and module._diff:
        result["diff"] = dict(before='<vmtune:tune profile="%s"/>\n' % data["previous"], after="",
                              before_header="%s metadata" % data["name"], after_header="%s metadata" % data["name"])
    return result


def reverted(module, tool):
    p = module.params
    rc, found = tool.run("revert", "--connect", p["connect"], "--dry-run", names=[p["name"]])
    found = redact_all(found)
    result = dict(changed=found["original"], vmtune=found)
    if found["original"] and module._diff:
        result["diff"] = dict(before=found["before"], after=found["after"],
                              before_header="%s (libvirt)" % found["name"],
                              after_header="%s (before vmtune)" % found["name"])
    if found["original"] and not module.check_mode:
        rc, done = tool.run("revert", "--connect", p["connect"], names=[p["name"]])
        result["vmtune"] = redact_all(done)
    return result


def main():
    spec = dict(
        name=dict(type="str", required=True),
        profile=dict(type="str"),
        state=dict(type="str", default="tuned", choices=["tuned", "untagged", "reverted"]),
        live=dict(type="bool", default=False),
        force_virtio=dict(type="bool", default=False),
        connect=dict(type="str", default="qemu:///system"),
    )
    spec.update(COMMON_ARGS)
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    tool = Vmtune(module)
    act = {"tuned": tuned, "untagged": untagged, "reverted": reverted}[module.params["state"]]
    module.exit_json(**act(module, tool))


if __name__ == "__main__":
    main()
