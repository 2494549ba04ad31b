"""fairseq-monoattn: monotonic location attention for length generalisation, as a fairseq
user-dir plugin (``--user-dir fairseq_monoattn``)."""
__version__ = "0.2.0"

from . import fairseq_compat  # noqa: F401,E402  (checkpoint loading, no dropped batches)
from . import criterions, models, tasks  # noqa: F401,E402  (registration)

__all__ = ["models", "__version__"]
