"""vmtune benchmarks (issue 5). ``bench/run`` runs them; see BENCHMARKS.md for the report.

Part 2, what vmtune itself costs, lives in ``bench/costs.py``. Part 1 (what a guest gains, real
VMs through libvirt) and the hook timing are still to come.
"""
