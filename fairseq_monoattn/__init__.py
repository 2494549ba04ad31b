"""fairseq-monoattn: monotonic location attention for length generalisation, as a fairseq
user-dir plugin (``--user-dir fairseq_monoattn``).

Importing the package registers its fairseq components (the registration list is
:func:`register`): at once when fairseq is loaded already (as under ``--user-dir``), otherwise
as soon as fairseq finishes loading (or, where a module of this package is the one importing
fairseq, as soon as that module's import finishes: ``_after_import.py``), so that the commands
which never need fairseq (data preparation, tables) start without it.  A user's package adds
named architectures over either model with :func:`register_preset` (docs/extending.md).
"""

__version__ = "0.3.0"


def register() -> None:
    """Register the plugin's model, presets, task, criterion and optimizer with fairseq (idempotent).
    Nothing else: the fixes for the plugin's experiments come with its task (fairseq_compat.py)."""
    from .criterions import sequence_accuracy  # noqa: F401
    from .models import (
        gru_seq2seq,  # noqa: F401  (the model and its presets)
        transformer_monoattn,  # noqa: F401  (the Transformer with location attention)
    )
    from .optim import torch_adamw  # noqa: F401  (--optimizer torch_adamw, the release's optimizer)
    from .tasks import length_generalization  # noqa: F401


from ._after_import import call_after_import  # noqa: E402
from .models.presets import register_preset  # noqa: E402  (a named architecture over either model)

call_after_import("fairseq", register, unless_inside=__name__)  # not inside our own imports

__all__ = ["register", "register_preset", "__version__"]
