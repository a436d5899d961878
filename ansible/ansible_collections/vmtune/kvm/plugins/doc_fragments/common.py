# -*- coding: utf-8 -*-
# Copyright: vmtune developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  executable:
    description:
      - The C(vmtune) command to run.
      - Default is C(vmtune) on C(PATH), else in C(/opt/vmtune/bin) or C(/usr/local/bin) (where the
        M(vmtune.kvm.host) role puts it).
    type: path
  config:
    description:
      - The host configuration vmtune reads (C(--config)).
      - Default is C(/etc/vmtune/vmtune.toml), or C($VMTUNE_CONFIG).
    type: path
  originals_dir:
    description:
      - Where C(vmtune apply) keeps each domain's XML from before its first apply, and C(vmtune revert)
        finds it (C($VMTUNE_ORIGINALS_DIR)).
      - Default is C(/var/lib/vmtune/originals).
    type: path
requirements:
  - vmtune on the managed host (the M(vmtune.kvm.host) role installs it).
"""
