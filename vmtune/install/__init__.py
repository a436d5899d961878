"""The hook's install and status side: the script libvirt runs (hookfile.py), the hook as
installed (hookcheck.py), the reaper's units and idle fast path (reaper.py),
HOOKS_DIR/vmtune.env (envfile.py) and what the hook holds now (status.py).

Standard library only at import time, as the hook and the reaper's fast path need."""
