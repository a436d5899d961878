#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: vmtune developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: doctor
short_description: What is wrong with a KVM host, as facts, failing on FAIL findings
description:
  - Runs C(vmtune doctor --json) and returns it as the fact C(vmtune_doctor)
    (C(ok), C(environment), C(counts), C(findings)).
  - Fails the task when a finding is C(FAIL), unless I(fail_on_fail=false).
  - With I(prometheus), also writes the findings and the host's state as node_exporter textfile metrics
    (C(--prometheus); needs prometheus_client beside vmtune, the C(prometheus) extra).
  - Reads the host; changes nothing but the I(prometheus) file. The task is C(changed) when that file's metrics
    changed (its C(vmtune_doctor_timestamp_seconds) aside, which changes every run).
author:
  - vmtune developers (@vmtune)
options:
  fail_on_fail:
    description: Fail the task when a finding is C(FAIL).
    type: bool
    default: true
  measure:
    description: Measure the clock with a 0.2 s busy loop per physical core (C(--no-measure) when false).
    type: bool
    default: true
  connect:
    description: Read the domains from libvirt at this URI. Default is libvirt's status files.
    type: str
  prometheus:
    description: Also write the metrics to this file, atomically (for node_exporter's textfile collector).
    type: path
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
- name: Check the host, and leave metrics for node_exporter
  vmtune.kvm.doctor:
    measure: false
    prometheus: /var/lib/prometheus/node-exporter/vmtune.prom
"""

RETURN = r"""
ansible_facts:
  description: C(vmtune_doctor), the JSON that C(vmtune doctor --json) prints.
  returned: always
  type: dict
  contains:
    vmtune_doctor:
      description: The report (C(ok), C(environment), C(roots), C(counts), C(findings)).
      type: dict
      returned: always
failed_findings:
  description: The C(FAIL) findings, each with its level, area, source, found, want and fix.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vmtune.kvm.plugins.module_utils.vmtune import COMMON_ARGS, Vmtune


STAMP = "vmtune_doctor_timestamp_seconds"


def _metrics(path):
    """The samples in the metrics file at ``path`` but the report's timestamp; None when there is none."""
    try:
        with open(path) as fh:
            return [line for line in fh.read().splitlines() if not line.startswith(STAMP)]
    except (IOError, OSError):
        return None


def main():
    spec = dict(
        fail_on_fail=dict(type="bool", default=True),
        measure=dict(type="bool", default=True),
        connect=dict(type="str"),
        prometheus=dict(type="path"),
    )
    spec.update(COMMON_ARGS)
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    p = module.params
    args = ([] if p["measure"] else ["--no-measure"]) + (["--connect", p["connect"]] if p["connect"] else [])
    args += ["--prometheus", p["prometheus"]] if p["prometheus"] and not module.check_mode else []
    written = p["prometheus"] and not module.check_mode
    before = _metrics(p["prometheus"]) if written else None
    rc, report = Vmtune(module).run("doctor", *args, ok=(0, 1))
    changed = bool(written) and _metrics(p["prometheus"]) != before
    failed = [f for f in report.get("findings", []) if f["level"] == "FAIL"]
    result = dict(changed=changed, ansible_facts=dict(vmtune_doctor=report), failed_findings=failed)
    if failed and p["fail_on_fail"]:
        lines = ["%s %s: %s" % (f["area"], f["source"], f["found"]) for f in failed]
        module.fail_json(msg="vmtune doctor: %d FAIL finding(s): %s" % (len(failed), "; ".join(lines)), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
