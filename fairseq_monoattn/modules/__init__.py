from .content import ContentScores, RelativeScores, RotaryScores
from .cross_attention import CrossAttention
from .direction_gate import DirectionGate
from .location import LocationAttention, leaky_clamp, softstair

__all__ = [
    "ContentScores", "RelativeScores", "RotaryScores", "CrossAttention", "DirectionGate",
    "LocationAttention", "leaky_clamp", "softstair",
]
