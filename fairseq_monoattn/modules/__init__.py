"""The attention's building blocks.  Importing this package registers the plugin's own entries
of every choice (``registry.py``): scorers, step activations, reference positions and focus
normalisations."""

from . import normalizations, references, scorers, steps  # noqa: F401  (registration)
from .cross_attention import CrossAttention
from .direction_gate import DirectionGate
from .location import LocationAttention, leaky_clamp
from .scorers import ContentScores, RelativeScores, RotaryScores
from .steps import softstair

__all__ = [
    "ContentScores",
    "RelativeScores",
    "RotaryScores",
    "CrossAttention",
    "DirectionGate",
    "LocationAttention",
    "leaky_clamp",
    "softstair",
]
