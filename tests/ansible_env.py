"""Running the vmtune.kvm collection (ansible/ansible_collections/vmtune/kvm) from the tests.

``playbook(path, tmp, extra_vars, check=False, diff=False) -> Run`` runs ``ansible-playbook -i localhost, -c
local`` with the collection on ANSIBLE_COLLECTIONS_PATH and everything Ansible writes under ``tmp``;
``Run.recap`` is the PLAY RECAP of localhost (ok, changed, failed, ...). ``task(module, args, tmp)`` runs one
task and returns its registered result (failed or not); ``tasks([...], tmp)`` runs several in one play. ``ansible-playbook`` is the one beside the test
interpreter, and modules run with that interpreter too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COLLECTIONS = ROOT / "ansible"
COLLECTION = COLLECTIONS / "ansible_collections" / "vmtune" / "kvm"
BIN = Path(sys.executable).parent
RECAP = re.compile(r"^localhost\s*:\s*(.*)$", re.M)


def tool(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed beside {sys.executable} (ansible-core is in the test extras)")
    return path


def environ(tmp: Path, **extra: str) -> dict[str, str]:
    """Ansible's environment: the collection, temporary dirs under ``tmp``, no colour, no VMTUNE_* of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VMTUNE_", "ANSIBLE_"))}
    (tmp / "ansible-home").mkdir(parents=True, exist_ok=True)
    env.update(ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_HOME=str(tmp / "ansible-home"),
               ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-home" / "tmp"), ANSIBLE_REMOTE_TEMP=str(tmp / "ansible-home" / "rtmp"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_DEPRECATION_WARNINGS="0")
    env.update(extra)
    return env


@dataclass
class Run:
    rc: int
    out: str
    err: str

    @property
    def recap(self) -> dict[str, int]:
        found = RECAP.findall(self.out)
        assert found, f"no PLAY RECAP for localhost:\n{self.out}\n{self.err}"
        return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", found[-1])}


def playbook(path: Path, tmp: Path, extra_vars: dict | None = None, check: bool = False, diff: bool = False,
             env: dict | None = None, timeout: float = 600) -> Run:
    argv = [str(tool("ansible-playbook")), "-i", "localhost,", "-c", "local", str(path)]
    if extra_vars:
        argv += ["-e", json.dumps(extra_vars)]
    argv += ["--check"] if check else []
    argv += ["--diff"] if diff else []
    proc = subprocess.run(argv, env=environ(tmp, **(env or {})), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, cwd=tmp)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def tasks(steps: list[dict], tmp: Path, env: dict | None = None) -> list[dict]:
    """Run one task per step (``{"module", "args", "env", "check", "diff"}``; all but module optional) in one
    play on localhost; return what each registered (failed or not). ``env`` goes to each step's module, after
    ``env`` for the whole run."""
    out = tmp / "task-results"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    body = []
    for i, step in enumerate(steps):
        body.append({"name": f"step {i}", step["module"]: step.get("args", {}), "register": f"r{i}",
                     "ignore_errors": True, "environment": {**(env or {}), **step.get("env", {})},
                     "check_mode": bool(step.get("check")), "diff": bool(step.get("diff"))})
        body.append({"name": f"keep {i}", "ansible.builtin.copy": {"content": f"{{{{ r{i} | to_json }}}}",
                                                                  "dest": str(out / f"{i}.json")},
                     "check_mode": False, "diff": False})
    book = tmp / "tasks.yml"
    book.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": body}]))
    run = playbook(book, tmp)
    results = []
    for i in range(len(steps)):
        path = out / f"{i}.json"
        assert path.exists(), f"step {i} left no result (rc {run.rc}):\n{run.out}\n{run.err}"
        results.append(json.loads(path.read_text()))
    return results


def task(module: str, args: dict, tmp: Path, check: bool = False, diff: bool = False,
         env: dict | None = None) -> dict:
    """Run one task of ``module`` with ``args`` on localhost; return what it registered."""
    return tasks([{"module": module, "args": args, "check": check, "diff": diff}], tmp, env)[0]
