#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: vmtune developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: restart_libvirt
short_description: Restart the libvirt daemon a host runs, without systemd
description:
  - For hosts whose libvirt daemons run without systemd (started as C(virtqemud -d) or C(libvirtd -d)).
    With systemd, use M(ansible.builtin.service) instead (the vmtune.kvm.host role does).
  - Each daemon of I(daemons) that runs (its pid file names a live process of that name) gets C(SIGTERM), is
    started again with C(-d), and the module waits until libvirt answers at I(uri).
  - A daemon that does not run is left alone. Running QEMU domains keep running across the restart.
  - The daemon starts with the module's environment less C(VMTUNE_*), and no open file of the module's.
author:
  - vmtune developers (@vmtune)
options:
  daemons:
    description: The daemons to look for, in order.
    type: list
    elements: str
    default: [virtqemud, libvirtd]
  run_dir:
    description: Where the daemons' pid files are (C(NAME.pid)).
    type: path
    default: /run
  uri:
    description: The libvirt URI to wait for after a restart (empty to not wait).
    type: str
    default: qemu:///system
  timeout:
    description: Seconds to wait for a daemon to stop, and then for libvirt to answer.
    type: int
    default: 60
attributes:
  check_mode:
    description: The module changes nothing on the host in check mode.
    support: full
  diff_mode:
    description: There is nothing to diff.
    support: none
"""

EXAMPLES = r"""
- name: Restart libvirt so that it sees a new hook
  vmtune.kvm.restart_libvirt:
"""

RETURN = r"""
restarted:
  description: The daemons restarted, each with its old and new pid.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "libvirtd", "old_pid": 2163, "new_pid": 4242}]
"""

import os
import signal
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule


def pid_of(run_dir, name):
    """The pid in ``run_dir/name.pid`` when that process runs and is ``name``; else None."""
    try:
        with open(os.path.join(run_dir, name + ".pid")) as fh:
            pid = int(fh.read().strip())
        with open("/proc/%d/comm" % pid) as fh:
            comm = fh.read().strip()
    except (IOError, OSError, ValueError):
        return None
    return pid if comm == name[:15] else None


def wait(predicate, timeout):
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            return False
        time.sleep(0.1)
    return True


def restart(module, name, pid):
    p = module.params
    os.kill(pid, signal.SIGTERM)
    if not wait(lambda: not os.path.exists("/proc/%d" % pid), p["timeout"]):
        module.fail_json(msg="%s (pid %d) did not stop within %d s" % (name, pid, p["timeout"]))
    daemon = module.get_bin_path(name, required=True, opt_dirs=["/usr/sbin", "/sbin"])
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith("VMTUNE_"))
    with open(os.devnull, "r+b") as null:
        code = subprocess.call([daemon, "-d"], env=env, stdin=null, stdout=null, stderr=null, close_fds=True)
    if code:
        module.fail_json(msg="%s -d exited %d" % (daemon, code))
    wait(lambda: pid_of(p["run_dir"], name) not in (None, pid), p["timeout"])
    return dict(name=name, old_pid=pid, new_pid=pid_of(p["run_dir"], name))


def answers(module):
    virsh = module.get_bin_path("virsh")
    if not virsh:
        return True
    return module.run_command([virsh, "-c", module.params["uri"], "version"])[0] == 0


def main():
    module = AnsibleModule(argument_spec=dict(
        daemons=dict(type="list", elements="str", default=["virtqemud", "libvirtd"]),
        run_dir=dict(type="path", default="/run"),
        uri=dict(type="str", default="qemu:///system"),
        timeout=dict(type="int", default=60),
    ), supports_check_mode=True)
    p = module.params
    running = [(name, pid_of(p["run_dir"], name)) for name in p["daemons"]]
    running = [(name, pid) for name, pid in running if pid is not None]
    if module.check_mode or not running:
        module.exit_json(changed=bool(running), restarted=[dict(name=n, old_pid=pid, new_pid=None) for n, pid in running])
    done = [restart(module, name, pid) for name, pid in running]
    if p["uri"] and not wait(lambda: answers(module), p["timeout"]):
        module.fail_json(msg="libvirt does not answer at %s after the restart" % p["uri"], restarted=done)
    module.exit_json(changed=True, restarted=done)


if __name__ == "__main__":
    main()
