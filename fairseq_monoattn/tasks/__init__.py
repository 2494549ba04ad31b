from . import length_generalization  # noqa: F401  (registers --task length_generalization)
