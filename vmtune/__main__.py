import os
import sys

if sys.argv[1:3] == ["hook", "reap"]:  # the reaper's timer, every minute: nothing heavy when idle
    from .install.reaper import fast

    done = fast(sys.argv[3:], os.environ)
    if done is not None:
        sys.exit(done)

from .cli import main  # noqa: E402

sys.exit(main())
