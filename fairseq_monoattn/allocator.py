"""glibc's ``malloc`` settings for training on the CPU: keep freed memory for the next update.

glibc gives memory back to the operating system as soon as more than ``M_TRIM_THRESHOLD`` is
free at the top of its heap, and serves every block larger than ``M_MMAP_THRESHOLD`` with a
mapping of its own, unmapped again on ``free``.  Both thresholds start at 128 KiB and grow with
the largest such mapped block freed so far (to once and twice its size).  A training update of
these models allocates and frees tens of MiB in blocks of up to a few MiB (the decoder steps'
activations, kept for the backward pass and freed by it), far more than twice the largest
block, so the heap is given back again and again, and the memory is asked for again, page by
page, zeroed: hundreds of page faults an update, time in the kernel that does no training
(docs/results/speed-record.md has the counts).

:func:`keep_freed_memory` sets ``M_MMAP_THRESHOLD`` to 32 MiB (glibc's largest on 64-bit
machines) and ``M_TRIM_THRESHOLD`` to 128 MiB, so the freed memory stays in the heap for the
next update.  A process holds up to 128 MiB of freed memory longer than glibc's defaults would;
its peak resident memory hardly moves.  The plugin's task calls it when it is set up
(``fairseq_compat.apply_fixes``; importing the plugin leaves glibc's settings alone), where glibc is
the allocator, unless:

- ``FAIRSEQ_MONOATTN_MALLOC=0`` is set (glibc's defaults are kept);
- glibc's malloc is already configured from the environment (``MALLOC_TRIM_THRESHOLD_``,
  ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TOP_PAD_``, ``MALLOC_MMAP_MAX_``, or a ``glibc.malloc``
  tunable in ``GLIBC_TUNABLES``): the user's settings stand;
- another allocator is preloaded (``LD_PRELOAD`` naming jemalloc, tcmalloc, mimalloc, ...).
"""

import ctypes
import os
from typing import Mapping, Optional

ENVIRONMENT_SWITCH = "FAIRSEQ_MONOATTN_MALLOC"
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD = 32 << 20  # the largest glibc accepts on 64-bit machines
TRIM_THRESHOLD = 128 << 20
GLIBC_MALLOC_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")

# whether keep_freed_memory has set the thresholds in this process (glibc has no way to read them back)
thresholds_set = False


def reason_to_keep_defaults(environ: Mapping[str, str]) -> Optional[str]:
    """Why glibc's malloc settings are to be left alone in a process with ``environ``, or None."""
    if environ.get(ENVIRONMENT_SWITCH, "1") == "0":
        return f"{ENVIRONMENT_SWITCH}=0"
    chosen = [name for name in GLIBC_MALLOC_VARIABLES if name in environ]
    if chosen:
        return f"malloc configured by {chosen[0]}"
    if "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        return "malloc configured by GLIBC_TUNABLES"
    if "malloc" in environ.get("LD_PRELOAD", "").lower():
        return "another allocator preloaded (LD_PRELOAD)"
    return None


def glibc():
    """The C library of this process where it is glibc (it has ``mallopt``), else None."""
    if os.name != "posix":
        return None
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not (hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt")):
        return None  # musl, macOS, ...
    return libc


def keep_freed_memory(environ: Mapping[str, str] = os.environ) -> bool:
    """Set glibc's mmap and trim thresholds (module docstring; setting them again changes nothing);
    whether they are set."""
    global thresholds_set
    libc = glibc()
    if libc is None or reason_to_keep_defaults(environ) is not None:
        return False
    # mallopt returns 1 on success; the mmap threshold first, as glibc then stops adapting both
    done = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    thresholds_set = thresholds_set or done
    return done
