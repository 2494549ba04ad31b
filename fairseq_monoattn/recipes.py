"""The paper's training recipe as fairseq-train options.

    fairseq-train DATA/bin --user-dir fairseq_monoattn --arch gru_onestep \\
        $(python -c "from fairseq_monoattn.recipes import PAPER_RECIPE; print(' '.join(PAPER_RECIPE))") \\
        --save-dir CHECKPOINTS --seed 1

Adam, lr 1e-3, no weight decay, gradient norm clipped at 5, 32 examples per batch; the lr is
halved when greedy valid accuracy has not improved for 4 epochs (fairseq's ``--lr-patience P``
halves after P + 1 epochs without improvement, hence 3); at most 100 epochs, early stop after
50 without improvement; checkpoint_best.pt is the epoch with the best greedy valid accuracy.
Batches are exactly 32 examples (no rounding to multiples of 8) and no example is skipped:
do not add ``--skip-invalid-size-inputs-valid-test``.
"""
from typing import List

OPTIMIZATION = [
    "--optimizer", "adam", "--lr", "1e-3", "--weight-decay", "0", "--clip-norm", "5",
    "--batch-size", "32", "--required-batch-size-multiple", "1",
]
SCHEDULE = [
    "--lr-scheduler", "reduce_lr_on_plateau", "--lr-shrink", "0.5", "--lr-patience", "3",
    "--max-epoch", "100", "--patience", "50",
]
SELECTION = [
    "--task", "length_generalization", "--criterion", "seq_acc", "--eval-accuracy",
    "--best-checkpoint-metric", "accuracy", "--maximize-best-checkpoint-metric",
]
PAPER_RECIPE: List[str] = OPTIMIZATION + SCHEDULE + SELECTION

# The selector of the authors' release: teacher-forced exact match from the criterion, no decoding.
TEACHER_FORCED_SELECTION: List[str] = [
    "--task", "length_generalization", "--criterion", "seq_acc",
    "--best-checkpoint-metric", "exact_match", "--maximize-best-checkpoint-metric",
]
PAPER_RECIPE_TEACHER_FORCED: List[str] = OPTIMIZATION + SCHEDULE + TEACHER_FORCED_SELECTION
