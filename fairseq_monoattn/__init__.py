"""fairseq-monoattn: monotonic location attention for length generalisation, as a fairseq
user-dir plugin (``--user-dir fairseq_monoattn``)."""
from . import checkpoint_compat  # noqa: F401  (before anything loads a checkpoint)
from . import models  # noqa: F401

__all__ = ["models"]
