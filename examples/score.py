"""Score a trained checkpoint on test splits: greedy sequence accuracy, mean edit distance and
the direction gate (for models that have one).

    python examples/score.py CHECKPOINT --data DIR/bin --splits test15 test30 test100 --out scores.json
    fairseq-monoattn-score CHECKPOINT --data DIR/bin --splits test15 test30 test100 --out scores.json

Accuracy: the whole output, EOS included, equals the target.  Edit distance: NLTK's, on the
tokens (EOS excluded).  Every example counts: the denominator is the split's full size.
Writes JSON (never over an existing file unless --force) and prints a table.
"""
from fairseq_monoattn.cli import score_main

if __name__ == "__main__":
    score_main()
