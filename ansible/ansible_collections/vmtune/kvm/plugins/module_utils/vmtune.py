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

from ansible.module_utils.six import string_types

DEFAULT_DIRS = ["/opt/vmtune/bin", "/usr/local/bin"]
# A graphics password, in either quote style: each value ends at its own quote only (lxml writes
# passwd="it's" with the apostrophe raw, and passwd='say "x"' the other way round).
SECRET = re.compile(r"""(\spasswd\s*=\s*)(?:"[^"]*"|'[^']*')""")
ERROR = "vmtune: error: "

COMMON_ARGS = dict(
    executable=dict(type="path"),
    config=dict(type="path"),
    originals_dir=dict(type="path"),
)


def _hide(match):
    quote = match.group(0)[-1]
    return "%s%s********%s" % (match.group(1), quote, quote)


def redact(xml):
    """``xml`` with graphics passwords replaced, for diff output (vmtune reads the secure XML)."""
    if not xml:
        return xml
    return SECRET.sub(_hide, xml)


def redact_all(data):
    """``data`` (vmtune's JSON: dicts, lists, strings) with every string redacted: its XMLs and diffs."""
    if isinstance(data, dict):
        return dict((key, redact_all(value)) for key, value in data.items())
    if isinstance(data, list):
        return [redact_all(value) for value in data]
    if isinstance(data, string_types):
        return redact(data)
    return data


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
        """Run ``vmtune COMMAND ARGS... --json [-- NAME...]``; return (rc, data). ``names`` go after ``--``, so
        that a domain named ``--all`` is never read as an option. ``ok`` lists the exit codes that still print
        JSON (``plan`` and ``doctor`` exit 1 on a problem). A ``vmtune: error:`` line on stderr fails the task
        whatever the exit code (``doctor --prometheus`` prints its report, then cannot write the file, and
        exits 1 as it does for a FAIL finding); so does any other exit code, with vmtune's one line."""
        ok = kwargs.get("ok", (0,))
        argv = self.argv(command, *args) + ["--json"]
        names = kwargs.get("names")
        if names:
            argv += ["--"] + [str(n) for n in names]
        rc, out, err = self.module.run_command(argv, environ_update=self.environ)
        if rc not in ok or self.errors(err):
            self.fail(argv, rc, out, err)
        try:
            return rc, json.loads(out)
        except ValueError:
            self.fail(argv, rc, out, err, "vmtune printed no JSON")
        return rc, None  # not reached

    @staticmethod
    def errors(err):
        """vmtune's ``vmtune: error: ...`` lines in ``err``."""
        return [line for line in (err or "").splitlines() if line.startswith(ERROR)]

    def fail(self, argv, rc, out, err, why=None):
        lines = self.errors(err)
        msg = lines[-1] if lines else (why or "%s exited %d" % (" ".join(argv), rc))
        self.module.fail_json(msg=msg, rc=rc, cmd=argv, stdout=out, stderr=err)
