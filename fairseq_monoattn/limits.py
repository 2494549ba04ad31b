"""Sizes the library and its command lines share (no torch import, so that ``--help`` is quick).

``NO_LENGTH_LIMIT``: nothing in this plugin depends on a maximum length, and fairseq's own defaults
(1024 positions) would silently filter or cut long test inputs.

``SCORING_BATCH_SIZE``: examples the scorer decodes at once.  No score depends on it (it decodes
in float64: ``fairseq_monoattn.scoring``); larger batches spread each decoder step's fixed cost over
more examples."""

NO_LENGTH_LIMIT = 1_000_000
SCORING_BATCH_SIZE = 256
