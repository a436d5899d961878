#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: vmtune developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: plan
short_description: The whole host's vmtune plan as facts, failing when it has problems
description:
  - Runs C(vmtune plan --json) and returns it as the fact C(vmtune_plan)
    (C(domains), C(nodes), C(problems), C(ok), C(uri)).
  - Fails the task when the plan has problems (overlapping or floating domains, domains not applied or not
    moved live, hugepages short), unless I(fail_on_problems=false).
  - Changes nothing.
author:
  - vmtune developers (@vmtune)
options:
  fail_on_problems:
    description: Fail the task when the plan lists a problem.
    type: bool
    default: true
  connect:
    description: The libvirt URI.
    type: str
    default: qemu:///system
extends_documentation_fragment:
  - vmtune.kvm.common
attributes:
  check_mode:
    description: The module changes nothing on the host in check mode.
    support: full
  diff_mode:
    description: There is nothing to diff.
    support: none
"""

EXAMPLES = r"""
- name: Assert a clean plan
  vmtune.kvm.plan:

- name: Read the plan whatever it says
  vmtune.kvm.plan:
    fail_on_problems: false
  register: plan
"""

RETURN = r"""
ansible_facts:
  description: C(vmtune_plan), the JSON that C(vmtune plan --json) prints.
  returned: always
  type: dict
  contains:
    vmtune_plan:
      description: The plan (C(domains), one per domain, C(nodes) per NUMA node, C(problems), C(ok)).
      type: dict
      returned: always
problems:
  description: The plan's problems, each with its kind, domains, CPUs, nodes and one-line message.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vmtune.kvm.plugins.module_utils.vmtune import COMMON_ARGS, Vmtune


def main():
    spec = dict(
        fail_on_problems=dict(type="bool", default=True),
        connect=dict(type="str", default="qemu:///system"),
    )
    spec.update(COMMON_ARGS)
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    rc, plan = Vmtune(module).run("plan", "--connect", module.params["connect"], ok=(0, 1))
    problems = plan.get("problems", [])
    result = dict(changed=False, ansible_facts=dict(vmtune_plan=plan), problems=problems)
    if problems and module.params["fail_on_problems"]:
        lines = ["%s: %s" % (p["kind"], p["message"]) for p in problems]
        module.fail_json(msg="vmtune plan: %d problem(s): %s" % (len(problems), "; ".join(lines)), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
