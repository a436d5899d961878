"""scripts/same-outputs: this checkout's rewriter against a commit's, case by case (the check behind a
change that says it changes no behaviour). Its comparison and its report are checked here on outputs
made up for the purpose; a whole run takes about 12 s and is left to the one who changes the rewriter."""

from __future__ import annotations

import importlib.machinery
import importlib.util

from conftest import ROOT


def _script():
    loader = importlib.machinery.SourceFileLoader("same_outputs", str(ROOT / "scripts" / "same-outputs"))
    spec = importlib.util.spec_from_loader("same_outputs", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_a_case_that_differs_anywhere_is_named_with_its_first_difference():
    script = _script()
    tuned = [["<domain>…</domain>", "latency", [], {}, [], [], "None"], "<domain/>", [], ["refused", "DoesNotFit", "x"]]
    ours = {"h | a.xml | latency": tuned, "h | b.xml | latency": ["refused", "InvalidInput", "bad"]}
    theirs = {"h | a.xml | latency": [tuned[0], "<domain />", [], tuned[3]], "h | c.xml | latency": tuned}
    assert script.differing(ours, ours) == []
    assert script.differing(ours, theirs) == ["h | a.xml | latency", "h | b.xml | latency", "h | c.xml | latency"]
    said = script.describe("h | a.xml | latency", ours["h | a.xml | latency"], theirs["h | a.xml | latency"])
    assert said.startswith("h | a.xml | latency: the untune differs at character 8:"), said
    assert script.describe("h | c.xml | latency", None, tuned) == "h | c.xml | latency: only in REV"
    assert "this tree ['refused'" in script.describe("h | b.xml | latency", ours["h | b.xml | latency"], tuned)


def test_a_revision_that_is_not_a_commit_is_one_line_and_exit_1(capsys):
    assert _script().main(["no-such-revision"]) == 1
    assert capsys.readouterr().err == "same-outputs: no-such-revision is not a commit here\n"


def test_the_speed_ab_against_the_same_commit_finds_the_same_outputs():
    """scripts/rewrite-ab REV: this checkout against HEAD (the same code, when nothing is changed
    but tests) in one process: every pair both trees place gives the same outputs, and a ratio."""
    import re
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "rewrite-ab"), "HEAD", "--profile", "balanced",
                           "--rounds", "2", "--widest", "1"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    line = done.stdout.splitlines()[0]
    m = re.fullmatch(r"balanced +\w+/this (\d+\.\d+) \(IQR [\d.]+-[\d.]+\), (\d+) pairs, (\d+) with other outputs", line)
    assert m is not None, done.stdout
    assert float(m.group(1)) > 0 and int(m.group(2)) > 40
    assert m.group(3) == "0" or subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD", "--", "vmtune"]).returncode
