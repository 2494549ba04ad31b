"""The GRU encoder-decoder (``gru_seq2seq.py``, which registers it with fairseq), its options
(``options.py``) and the paper's models as named presets (``presets.py``)."""
