"""Optimizers: fairseq's Adam update applied to every parameter at once (the task's step), and
torch's AdamW as ``--optimizer torch_adamw`` (the authors' release's optimizer)."""

from .foreach_adam import foreach_adam_step

__all__ = ["foreach_adam_step"]
