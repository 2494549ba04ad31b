from . import sequence_accuracy  # noqa: F401  (registers --criterion seq_acc)
