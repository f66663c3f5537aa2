"""`python -m reports.eval`: the eval grid's command line (reports.eval.sweep.main; its module doc
lists the options), stopped by Ctrl-C or SIGTERM with the rows written so far kept."""

from __future__ import annotations

import signal

from reports.eval.sweep import main
from search.__main__ import exit_now


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM stops a grid as Ctrl-C does."""
    del signum, frame
    raise KeyboardInterrupt


signal.signal(signal.SIGINT, signal.default_int_handler)  # even where started ignoring it
signal.signal(signal.SIGTERM, _terminate)
exit_now(main())  # no interpreter teardown: worker threads may still hold torch
