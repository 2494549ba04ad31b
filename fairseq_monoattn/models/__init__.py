from . import gru_seq2seq, presets  # noqa: F401  (registers the model and its architectures)
