"""Optimizer steps: fairseq's Adam update applied to every parameter at once."""

from .foreach_adam import foreach_adam_step

__all__ = ["foreach_adam_step"]
