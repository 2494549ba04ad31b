"""fairseq-monoattn: monotonic location attention for length generalisation, as a fairseq
user-dir plugin (``--user-dir fairseq_monoattn``)."""
from . import fairseq_compat  # noqa: F401  (checkpoint loading, no dropped batches)
from . import criterions, models, tasks  # noqa: F401  (registration)

__all__ = ["models"]
