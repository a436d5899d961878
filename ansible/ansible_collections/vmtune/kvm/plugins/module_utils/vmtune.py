# -*- coding: utf-8 -*-
# Copyright: vmtune developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Running ``vmtune ... --json`` for the vmtune.kvm modules.

The modules never read vmtune's human text: every call asks for ``--json`` and reads that. An error
is vmtune's own one line (``vmtune: error: ...``), which becomes the task's ``msg`` as it is.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

DEFAULT_DIRS = ["/opt/vmtune/bin", "/usr/local/bin"]
SECRET = re.compile(r"""(\spasswd=)(["'])[^"']*\2""")

COMMON_ARGS = dict(
    executable=dict(type="path"),
    config=dict(type="path"),
    originals_dir=dict(type="path"),
)


def redact(xml):
    """``xml`` with graphics passwords replaced, for diff output (vmtune reads the secure XML)."""
    if not xml:
        return xml
    return SECRET.sub(r"\1\2********\2", xml)


class Vmtune(object):
    """One module's view of the vmtune command line."""

    def __init__(self, module):
        self.module = module
        params = module.params
        self.executable = params.get("executable") or module.get_bin_path("vmtune", opt_dirs=DEFAULT_DIRS)
        if not self.executable:
            module.fail_json(msg="vmtune is not installed here (no vmtune on PATH or in %s); the vmtune.kvm.host "
                                 "role installs it, or give executable" % ", ".join(DEFAULT_DIRS))
        self.environ = {}
        if params.get("originals_dir"):
            self.environ["VMTUNE_ORIGINALS_DIR"] = params["originals_dir"]

    def argv(self, command, *args):
        out = [self.executable, command] + [str(a) for a in args]
        if self.module.params.get("config"):
            out += ["--config", self.module.params["config"]]
        return out

    def run(self, command, *args, **kwargs):
        """Run ``vmtune COMMAND ARGS... --json``; return (rc, data). ``ok`` lists the exit codes that
        still print JSON (``plan`` and ``doctor`` exit 1 on a problem); any other exit fails the task with
        vmtune's one-line message."""
        ok = kwargs.get("ok", (0,))
        argv = self.argv(command, *args) + ["--json"]
        rc, out, err = self.module.run_command(argv, environ_update=self.environ)
        if rc not in ok:
            self.fail(argv, rc, out, err)
        try:
            return rc, json.loads(out)
        except ValueError:
            self.fail(argv, rc, out, err, "vmtune printed no JSON")
        return rc, None  # not reached

    def fail(self, argv, rc, out, err, why=None):
        lines = [line for line in (err or "").splitlines() if line.startswith("vmtune: error: ")]
        msg = lines[-1] if lines else (why or "%s exited %d" % (" ".join(argv), rc))
        self.module.fail_json(msg=msg, rc=rc, cmd=argv, stdout=out, stderr=err)
