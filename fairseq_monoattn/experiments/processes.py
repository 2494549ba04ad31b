"""Child processes that do not outlive their parent: a run's worker stops when its launcher
dies (killed, even with SIGKILL), and fairseq-train stops when its worker dies, so stopping a
sweep never leaves trainings running on; an interrupted run resumes from its last checkpoint."""

import ctypes
import os
import signal
import sys
from typing import Callable, Optional

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> Optional[Callable[[], None]]:
    """A ``preexec_fn`` for subprocess that makes the child get SIGTERM when this process ends
    (Linux; elsewhere None, and children behave as the platform makes them)."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()

    def set_death_signal():
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent ended before the death signal was set
            os.kill(os.getpid(), signal.SIGTERM)

    return set_death_signal
