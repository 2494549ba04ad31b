"""--criterion seq_acc and --task length_generalization: exact values on hand-made batches,
sums across batches, greedy validation against fairseq-generate, checkpoint selection,
the LR schedule and early stopping following the chosen metric, and the paper's recipe."""

import json
import logging
import math
import random
from argparse import Namespace
from contextlib import contextmanager

import pytest
import torch
from fairseq import options, tasks
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.data import Dictionary
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.logging import metrics
from fairseq.optim import build_optimizer
from fairseq.optim.lr_scheduler import build_lr_scheduler
from fairseq_cli_helpers import USER_DIR, copy_examples, generate, train

from fairseq_monoattn.criterions.sequence_accuracy import SequenceAccuracyCriterion
from fairseq_monoattn.data.writer import write_dataset
from fairseq_monoattn.limits import NO_LENGTH_LIMIT
from fairseq_monoattn.metrics import Tally
from fairseq_monoattn.recipes import PAPER_RECIPE, PAPER_RECIPE_TEACHER_FORCED, recipe_options, with_value

LN2, LN10 = math.log(2), math.log(10)

# ---------------------------------------------------------------- criterion, hand-made batch

# vocabulary: <s>=0 <pad>=1 </s>=2 <unk>=3 x=4 y=5
TARGETS = torch.tensor(
    [
        [4, 5, 2],  # every argmax right              -> sequence right
        [5, 2, 1],  # first token wrong, pad ignored  -> sequence wrong
        [4, 4, 2],
    ]
)  # EOS wrong                       -> sequence wrong
ARGMAX = torch.tensor([[4, 5, 2], [4, 2, 5], [4, 4, 4]])
# each position: p = 0.5 on its argmax, 0.1 on each of the 5 other tokens
# 8 non-pad target tokens, 6 right (-log 0.5 each), 2 wrong (-log 0.1 each)
NLL = 6 * LN2 + 2 * LN10


def target_dictionary():
    dictionary = Dictionary()
    for symbol in "xy":
        dictionary.add_symbol(symbol)
    return dictionary


class FixedOutputModel(torch.nn.Module):
    """Stands in for a seq2seq model: returns given log-probabilities for the batch rows."""

    def __init__(self, lprobs):
        super().__init__()
        self.lprobs = lprobs

    def forward(self, rows):
        return self.lprobs[rows], None

    def get_normalized_probs(self, net_output, log_probs):
        assert log_probs
        return net_output[0]

    def get_targets(self, sample, net_output):
        return sample["target"]


def fixed_lprobs():
    probs = torch.full((*ARGMAX.shape, 6), 0.1)
    probs.scatter_(-1, ARGMAX.unsqueeze(-1), 0.5)
    return probs.log()


def batch(rows):
    rows = torch.tensor(rows)
    target = TARGETS[rows]
    return {"net_input": {"rows": rows}, "target": target, "ntokens": int(target.ne(1).sum())}


def criterion(label_smoothing=0.0):
    task = Namespace(target_dictionary=target_dictionary())
    return SequenceAccuracyCriterion(task, sentence_avg=False, label_smoothing=label_smoothing)


def reduced(logging_outputs_per_call):
    """Smoothed values after reduce_metrics was called once per list (one call per batch)."""
    with metrics.aggregate(new_root=True) as agg:
        for logging_outputs in logging_outputs_per_call:
            SequenceAccuracyCriterion.reduce_metrics(logging_outputs)
        return agg.get_smoothed_values()


def test_criterion_counts_loss_token_accuracy_and_teacher_forced_exact_match():
    model = FixedOutputModel(fixed_lprobs())
    loss, sample_size, log = criterion()(model, batch([0, 1, 2]))
    assert loss.item() == pytest.approx(NLL, abs=1e-5)
    assert sample_size == 8
    assert (log["ntokens"], log["nsentences"], log["n_correct_tokens"], log["n_correct_sequences"]) == (8, 3, 6, 1)
    values = reduced([[log]])
    assert values["loss"] == values["nll_loss"] == round(NLL / 8 / LN2, 3) == 1.58  # base 2
    assert values["token_acc"] == 75.0
    assert values["exact_match"] == 33.333


def test_label_smoothing_spreads_epsilon_over_the_other_tokens():
    epsilon, vocab = 0.1, 6
    loss, _, log = criterion(epsilon)(FixedOutputModel(fixed_lprobs()), batch([0, 1, 2]))
    # sum over the other tokens of -log p: right positions 5 * ln 10, wrong ones ln 2 + 4 ln 10
    others = 6 * 5 * LN10 + 2 * (LN2 + 4 * LN10)
    assert loss.item() == pytest.approx((1 - epsilon) * NLL + epsilon / (vocab - 1) * others, abs=1e-5)
    assert log["nll_loss"].item() == pytest.approx(NLL, abs=1e-5)
    reference, _ = label_smoothed_nll_loss(fixed_lprobs().view(-1, vocab), TARGETS.view(-1), epsilon, ignore_index=1)
    assert loss.item() == pytest.approx(reference.item(), abs=1e-5)


def test_metrics_of_two_halves_equal_the_metrics_of_the_whole_batch():
    model, seq_acc = FixedOutputModel(fixed_lprobs()), criterion()
    whole = reduced([[seq_acc(model, batch([0, 1, 2]))[2]]])
    first, second = seq_acc(model, batch([0]))[2], seq_acc(model, batch([1, 2]))[2]
    assert reduced([[first], [second]])["exact_match"] == 33.333  # not the mean of 100 and 0
    for parts in ([[first, second]], [[first], [second]]):  # two workers / two batches
        assert reduced(parts) == whole


# ---------------------------------------------------------------- task: greedy validation, checkpoint selection


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models gain nothing from threads, and on a busy 2-core machine two torch threads
    make these runs over ten times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def parsed(data, argv):
    """The configuration fairseq-train DATA --arch gru_onestep ARGV would run with."""
    args = options.parse_args_and_arch(
        options.get_training_parser(), [str(data), "--arch", "gru_onestep", *argv, "--user-dir", USER_DIR]
    )
    return convert_namespace_to_omegaconf(args)


@pytest.fixture(scope="module")
def tiny_copy(tmp_path_factory):
    """200 training pairs of 2-4 digits; 13 valid pairs (not a multiple of 8)."""
    rng = random.Random(0)
    splits = {"train": copy_examples(rng, 200, 2, 4), "valid": copy_examples(rng, 13, 2, 5)}
    out = tmp_path_factory.mktemp("tiny") / "copy"
    write_dataset(splits, out, "copy", seed=0)
    return out / "bin"


@contextmanager
def logged_stats():
    """Collects the end-of-epoch {"train": [...], "valid": [...]} stats of --log-format json."""
    stats = {"train": [], "valid": []}

    class Collect(logging.Handler):
        def emit(self, record):
            if record.name in stats:  # fairseq renames its progress-bar logger to the tag
                stats[record.name].append(json.loads(record.getMessage()))

    logger, handler = logging.getLogger("fairseq.logging.progress_bar"), Collect()
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield stats
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


SHORT_RUN = [
    "--arch",
    "gru_onestep",
    "--dropout",
    "0.1",
    "--optimizer",
    "adam",
    "--lr",
    "0.01",
    "--batch-size",
    "16",
    "--seed",
    "1",
    "--num-workers",
    "0",
    "--log-format",
    "json",
    "--no-progress-bar",
]
PATIENCE, LR_PATIENCE, MAX_EPOCH = 3, 0, 6


@pytest.fixture(scope="module")
def greedy_run(tiny_copy, tmp_path_factory):
    """Trained with greedy accuracy driving everything: (save dir, logged stats)."""
    save = tmp_path_factory.mktemp("greedy_run")
    with logged_stats() as stats:
        train(
            [
                str(tiny_copy),
                *SHORT_RUN,
                "--save-dir",
                str(save),
                "--batch-size-valid",
                "8",
                "--task",
                "length_generalization",
                "--criterion",
                "seq_acc",
                "--eval-accuracy",
                "--best-checkpoint-metric",
                "accuracy",
                "--maximize-best-checkpoint-metric",
                "--lr-scheduler",
                "reduce_lr_on_plateau",
                "--lr-shrink",
                "0.5",
                "--lr-patience",
                str(LR_PATIENCE),
                "--patience",
                str(PATIENCE),
                "--max-epoch",
                str(MAX_EPOCH),
            ]
        )
    return save, stats


def valid_values(stats, key):
    return [float(epoch[f"valid_{key}"]) for epoch in stats["valid"]]


def token_ids(dictionary, text):
    return [dictionary.index(token) for token in text.split()] + [dictionary.eos()]


UNCUT = 20  # fairseq-generate's length limit here: beyond every limit validation sets on valid


def validation_batches(data):
    """The example ids of each validation batch (--batch-size-valid 8), in fairseq's order."""
    task = tasks.setup_task(parsed(data, ["--task", "length_generalization"]).task)
    task.load_dataset("valid")
    batches = task.get_batch_iterator(
        dataset=task.dataset("valid"), max_sentences=8, max_positions=None, seed=1, num_workers=0
    ).next_epoch_itr(shuffle=False)
    return [sample["id"].tolist() for sample in batches]


def generate_tally(data, checkpoint, tmp_path) -> Tally:
    """Tally of fairseq-generate's greedy output on valid, each output cut where validation cuts it.

    Validation stops a batch's outputs after its longest target + 1 tokens (EOS included), a limit
    of the batch; the task's generator sets each example's limit from its own source, so
    fairseq-generate runs with a limit past all of them (UNCUT) and each output is cut here at its
    validation batch's limit: a greedy output is the same prefix whatever the limit."""
    lines = generate(
        [
            str(data),
            "--path",
            str(checkpoint),
            "--task",
            "length_generalization",
            "--beam",
            "1",
            "--min-len",
            "0",
            "--max-len-a",
            "0",
            "--max-len-b",
            str(UNCUT),
            "--batch-size",
            "8",
            "--seed",
            "1",
            "--num-workers",
            "0",
        ],
        tmp_path,
        "valid",
    )
    dictionary = Dictionary.load(str(data / "dict.tgt.txt"))
    # "T-i<TAB>target text", "H-i<TAB>score<TAB>hypothesis text": key -> text
    columns = {line.split("\t")[0]: line.split("\t")[-1] for line in lines if line[:2] in ("H-", "T-")}
    hypotheses, targets = [], []
    for ids in validation_batches(data):
        batch_targets = [token_ids(dictionary, columns[f"T-{i}"]) for i in ids]
        limit = max(len(target) for target in batch_targets)  # GreedyDecoder's max_len_b in validation
        assert limit + 1 < UNCUT
        for i, target in zip(ids, batch_targets):
            output = token_ids(dictionary, columns[f"H-{i}"])
            hypotheses.append(output if len(output) <= limit + 1 else output[:limit] + [dictionary.eos()])
            targets.append(target)
    tally = Tally()
    tally.add(hypotheses, targets, dictionary.eos())
    return tally


def constant_output_validation(data, batch_indices, emit="<unk>", print_samples=False):
    """valid_step on batches, with a model whose argmax is always the token `emit`."""
    valid, logs, _ = validation_with_parts(data, batch_indices, emit, print_samples)
    return valid, logs


def validation_with_parts(data, batch_indices, emit="<unk>", print_samples=False, watch_model=None):
    """constant_output_validation's (valid, logging outputs) and (task, model, criterion);
    ``watch_model(model)`` is called on the built model before the validation."""
    cfg = parsed(
        data,
        [
            "--task",
            "length_generalization",
            "--criterion",
            "seq_acc",
            "--eval-accuracy",
            *(["--eval-accuracy-print-samples"] if print_samples else []),
        ],
    )
    task = tasks.setup_task(cfg.task)
    model, seq_acc = task.build_model(cfg.model).eval(), task.build_criterion(cfg.criterion)
    token = task.target_dictionary.index(emit)
    model.decoder.output_layer = lambda features: torch.nn.functional.one_hot(
        torch.full(features.shape[:-1], token), len(task.target_dictionary)
    ).float()
    if watch_model is not None:
        watch_model(model)
    task.load_dataset("valid")
    valid = task.dataset("valid")
    task.begin_valid_epoch(1, model)
    with torch.no_grad():
        logs = [
            task.valid_step(valid.collater([valid[i] for i in indices]), model, seq_acc)[2] for indices in batch_indices
        ]
    return valid, logs, (task, model, seq_acc)


def test_greedy_decoding_stops_one_token_after_the_longest_target_of_the_batch(tiny_copy):
    """A runaway output is <unk> * L + EOS with L = longest target of its batch (EOS
    counted): L + 1 tokens, so against a target of n < L body tokens its edit distance is L."""
    batches = [[0, 1, 2], [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]]
    valid, logs = constant_output_validation(tiny_copy, batches)
    for indices, log in zip(batches, logs):
        longest = max(len(valid[i]["target"]) for i in indices)
        assert (log["_acc_total"], log["_acc_correct"]) == (len(indices), 0)
        assert log["_acc_edit_distance"] == longest * len(indices)


def test_greedy_decoding_may_end_at_the_first_step(tiny_copy):
    """No minimum length: a model whose argmax is EOS outputs nothing (edit distance = target
    length), exactly what teacher-forced exact match assumes."""
    valid, (log,) = constant_output_validation(tiny_copy, [list(range(13))], emit="</s>")
    assert log["_acc_edit_distance"] == sum(len(valid[i]["target"]) - 1 for i in range(13))


def test_print_samples_logs_three_pairs_per_validation(tiny_copy, caplog):
    with caplog.at_level(logging.INFO, logger="fairseq_monoattn.tasks.length_generalization"):
        constant_output_validation(tiny_copy, [[0, 1], [2, 3, 4]], print_samples=True)
    printed = [r.getMessage() for r in caplog.records if "greedy hypothesis" in r.getMessage()]
    assert len(printed) == 3 and printed[0].endswith("<unk> </s>")


def test_validation_logs_the_direction_gate_of_every_source(tiny_copy):
    """_gate_sum / _gate_forward / _gate_total are sum(g), #(g > 0.5) and #sources of the
    model's own gate, per batch; reduced, the mean g and the percent read forward."""
    batches = [[0, 1, 2], [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]]
    encoder_passes = []
    valid, logs, (task, model, seq_acc) = validation_with_parts(
        tiny_copy, batches, watch_model=lambda m: m.encoder.register_forward_hook(lambda *_: encoder_passes.append(1))
    )
    # one encoder pass a batch: the greedy decoding and the teacher-forced pass of the examples it
    # got wrong (here all: the loss, and the gate from the decoding's first step) read its output
    assert len(encoder_passes) == len(batches)
    gates = []
    for indices, log in zip(batches, logs):
        sample = valid.collater([valid[i] for i in indices])
        with torch.no_grad():
            gate = model.direction_gate(sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]).double()
        gates.append(gate)
        assert log["_gate_total"] == len(indices) and log["_gate_forward"] == int((gate > 0.5).sum())
        assert log["_gate_sum"] == pytest.approx(gate.sum().item(), rel=1e-12)
    everything = torch.cat(gates)
    with metrics.aggregate() as aggregated:
        task.reduce_metrics(logs, seq_acc)
    values = aggregated.get_smoothed_values()
    assert values["direction_gate"] == round(everything.mean().item(), 3)
    assert values["reads_forward"] == round(100.0 * (everything > 0.5).double().mean().item(), 3)


def test_validation_logs_the_direction_gate_each_epoch(greedy_run):
    _, stats = greedy_run
    gates = valid_values(stats, "direction_gate")
    assert len(gates) == len(stats["valid"]) and all(0.0 <= g <= 1.0 for g in gates)
    assert all(0.0 <= share <= 100.0 for share in valid_values(stats, "reads_forward"))


def test_every_valid_example_is_scored(greedy_run):
    _, stats = greedy_run
    assert valid_values(stats, "acc_total") == [13.0] * len(stats["valid"])


def test_greedy_validation_equals_fairseq_generate_scored_by_tally(greedy_run, tiny_copy, tmp_path):
    save, stats = greedy_run
    accuracies = valid_values(stats, "accuracy")
    assert any(0 < accuracy < 100 for accuracy in accuracies)  # the comparison is not trivial
    for epoch, accuracy, distance in zip(
        range(1, len(accuracies) + 1), accuracies, valid_values(stats, "edit_distance")
    ):
        tally = generate_tally(tiny_copy, save / f"checkpoint{epoch}.pt", tmp_path / str(epoch))
        assert tally.size == 13
        assert (round(tally.accuracy, 3), round(tally.mean_edit_distance, 3)) == (accuracy, distance)


def test_teacher_forced_exact_match_equals_greedy_accuracy(greedy_run):
    """All argmaxes right under teacher forcing <=> greedy decoding reproduces the target
    (same prefixes at every step); greedy validation therefore runs with no minimum length."""
    _, stats = greedy_run
    assert valid_values(stats, "exact_match") == valid_values(stats, "accuracy")


def test_checkpoint_best_follows_greedy_accuracy(greedy_run):
    save, stats = greedy_run
    accuracies = valid_values(stats, "accuracy")
    best = torch.load(save / "checkpoint_best.pt", weights_only=True)
    assert best["extra_state"]["best"] == max(accuracies)
    assert best["extra_state"]["val_loss"] == max(accuracies)
    # fairseq replaces checkpoint_best.pt on ties (>=): the last epoch reaching the maximum
    last_best_epoch = max(e for e, a in enumerate(accuracies, 1) if a == max(accuracies))
    same_epoch = torch.load(save / f"checkpoint{last_best_epoch}.pt", weights_only=True)
    assert all(torch.equal(best["model"][k], same_epoch["model"][k]) for k in best["model"])
    # fairseq saves before it steps the lr scheduler: the saved plateau best is that of the epochs before
    assert best["optimizer_history"][-1]["lr_scheduler_state"]["best"] == max(
        accuracies[: last_best_epoch - 1], default=-math.inf
    )


def expected_stop_epoch(scores, patience, max_epoch):
    best, runs = None, 0
    for epoch, score in enumerate(scores, 1):
        best, runs = (score, 0) if best is None or score > best else (best, runs + 1)
        if runs >= patience:
            return epoch
    return max_epoch


def expected_learning_rates(scores, lr, shrink, patience, threshold=1e-4):
    """torch's ReduceLROnPlateau in "max" mode: shrink after more than `patience` epochs
    not beating best * (1 + threshold).  Returns the lr used in each epoch."""
    rates, best, bad = [lr], -math.inf, 0
    for score in scores[:-1]:
        best, bad = (score, 0) if score > best * (1 + threshold) else (best, bad + 1)
        if bad > patience:
            lr, bad = lr * shrink, 0
        rates.append(lr)
    return rates


# Scripted validation: greedy accuracy at each epoch is fixed by the test, so early stopping and
# the lr schedule are checked against values that do not depend on how training goes here.
SCRIPTED_CORRECT = [2, 5, 5, 5, 5, 9, 9, 9, 9, 9, 9, 9]  # of 13 valid examples, epoch by epoch


@pytest.fixture
def scripted_accuracy(monkeypatch):
    """Replace the scoring of the greedy outputs in validation by the counts of SCRIPTED_CORRECT (by epoch)."""
    from fairseq_monoattn.tasks.length_generalization import LengthGeneralizationTask

    epochs = []
    original_begin = LengthGeneralizationTask.begin_valid_epoch

    def begin_valid_epoch(self, epoch, model):
        epochs.append(epoch)
        return original_begin(self, epoch, model)

    def tally(self, sample, hypotheses):
        size = len(sample["target"])
        return Tally(size=size, correct=round(SCRIPTED_CORRECT[epochs[-1] - 1] * size / 13), edit_distance=size)

    monkeypatch.setattr(LengthGeneralizationTask, "begin_valid_epoch", begin_valid_epoch)
    monkeypatch.setattr(LengthGeneralizationTask, "tally", tally)
    return [100 * c / 13 for c in SCRIPTED_CORRECT]


def scripted_run(tiny_copy, save, *extra):
    with logged_stats() as stats:
        train(
            [
                str(tiny_copy),
                *SHORT_RUN,
                "--save-dir",
                str(save),
                "--batch-size-valid",
                "13",
                "--task",
                "length_generalization",
                "--criterion",
                "seq_acc",
                "--eval-accuracy",
                "--best-checkpoint-metric",
                "accuracy",
                "--maximize-best-checkpoint-metric",
                "--lr-scheduler",
                "reduce_lr_on_plateau",
                "--lr-shrink",
                "0.5",
                *extra,
            ]
        )
    return stats


def test_early_stopping_and_lr_schedule_follow_greedy_accuracy(tiny_copy, tmp_path, scripted_accuracy):
    stats = scripted_run(
        tiny_copy,
        tmp_path,
        "--lr-patience",
        "1",
        "--patience",
        "4",
        "--max-epoch",
        str(len(SCRIPTED_CORRECT)),
        "--no-epoch-checkpoints",
    )
    accuracies = valid_values(stats, "accuracy")
    assert accuracies == pytest.approx(scripted_accuracy[: len(accuracies)], abs=1e-3)
    # best 69.2 at epoch 6, then 4 epochs without improvement: stop after epoch 10 of 12
    assert len(accuracies) == expected_stop_epoch(scripted_accuracy, 4, len(SCRIPTED_CORRECT)) == 10
    used = [float(epoch["train_lr"]) for epoch in stats["train"]]
    expected = expected_learning_rates(accuracies, 0.01, 0.5, 1)
    assert used == pytest.approx(expected)
    assert expected[:6] == [0.01, 0.01, 0.01, 0.01, 0.005, 0.005]  # halved after 2 epochs at 38.5 after the best


def test_stop_after_perfect_counts_validations_at_100(tiny_copy, tmp_path, monkeypatch, scripted_accuracy):
    monkeypatch.setattr(__name__ + ".SCRIPTED_CORRECT", [4, 13, 12, 13, 13, 13, 13, 13])
    stats = scripted_run(
        tiny_copy,
        tmp_path,
        "--stop-after-perfect",
        "3",
        "--patience",
        "50",
        "--max-epoch",
        "8",
        "--no-epoch-checkpoints",
    )
    # 100 at epoch 2, broken at 3, then 100 at epochs 4, 5 and 6: stop after epoch 6
    assert valid_values(stats, "accuracy") == pytest.approx([100 * 4 / 13, 100, 100 * 12 / 13, 100, 100, 100], abs=1e-3)


def test_stop_after_perfect_needs_accuracy_as_the_metric(tiny_copy):
    cfg = parsed(
        tiny_copy,
        [
            "--task",
            "length_generalization",
            "--criterion",
            "seq_acc",
            "--stop-after-perfect",
            "2",
            "--best-checkpoint-metric",
            "loss",
        ],
    )
    with pytest.raises(ValueError, match="--stop-after-perfect"):
        tasks.setup_task(cfg.task)


def test_teacher_forced_exact_match_selects_checkpoints_without_decoding(tiny_copy, tmp_path):
    with logged_stats() as stats:
        train(
            [
                str(tiny_copy),
                *SHORT_RUN,
                "--save-dir",
                str(tmp_path),
                "--max-epoch",
                "3",
                "--task",
                "length_generalization",
                "--criterion",
                "seq_acc",
                "--best-checkpoint-metric",
                "exact_match",
                "--maximize-best-checkpoint-metric",
            ]
        )
    scores = valid_values(stats, "exact_match")
    assert len(scores) == 3 and "valid_accuracy" not in stats["valid"][0]
    best = torch.load(tmp_path / "checkpoint_best.pt", weights_only=True)
    assert best["extra_state"]["best"] == max(scores)


# ---------------------------------------------------------------- options and the paper's recipe


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--best-checkpoint-metric", "accuracy", "--maximize-best-checkpoint-metric"], "needs --eval-accuracy"),
        (["--eval-accuracy", "--best-checkpoint-metric", "accuracy"], "needs --maximize"),
        (["--best-checkpoint-metric", "exact_match"], "needs --maximize"),
        (["--best-checkpoint-metric", "loss", "--maximize-best-checkpoint-metric"], "is minimised"),
    ],
)
def test_inconsistent_checkpoint_metric_is_refused(tiny_copy, argv, message):
    cfg = parsed(tiny_copy, ["--task", "length_generalization", "--criterion", "seq_acc", *argv])
    with pytest.raises(ValueError, match=message):
        tasks.setup_task(cfg.task)


def test_task_never_filters_long_examples_by_default(tiny_copy):
    cfg = parsed(tiny_copy, ["--task", "length_generalization", "--arch", "lstm"])
    assert (cfg.task.max_source_positions, cfg.task.max_target_positions) == (NO_LENGTH_LIMIT, NO_LENGTH_LIMIT)


def test_paper_recipe_options(tiny_copy):
    cfg = parsed(tiny_copy, PAPER_RECIPE)
    assert (cfg.optimizer._name, cfg.optimization.lr, cfg.optimizer.weight_decay) == ("adam", [1e-3], 0)
    assert (cfg.optimization.clip_norm, cfg.dataset.batch_size, cfg.dataset.required_batch_size_multiple) == (5, 32, 1)
    assert (cfg.optimization.max_epoch, cfg.checkpoint.patience) == (100, 50)
    assert cfg.dataset.batch_size_valid == 256 and cfg.task.train_batches == "random"
    assert cfg.dataset.num_workers == 0  # batches made in the training process
    assert not cfg.dataset.skip_invalid_size_inputs_valid_test
    assert (cfg.task._name, cfg.task.eval_accuracy, cfg.criterion._name) == ("length_generalization", True, "seq_acc")
    assert (cfg.checkpoint.best_checkpoint_metric, cfg.checkpoint.maximize_best_checkpoint_metric) == ("accuracy", True)
    assert parsed(tiny_copy, PAPER_RECIPE_TEACHER_FORCED).checkpoint.best_checkpoint_metric == "exact_match"


def test_paper_recipe_halves_the_lr_on_the_fifth_epoch_without_improvement(tiny_copy):
    """As the release's ReduceLROnPlateau(patience=4)."""
    cfg = parsed(tiny_copy, PAPER_RECIPE)
    optimizer = build_optimizer(cfg.optimizer, [torch.nn.Parameter(torch.zeros(1))])
    scheduler = build_lr_scheduler(cfg.lr_scheduler, optimizer)
    rates = [scheduler.step(epoch, accuracy) for epoch, accuracy in enumerate([50, 60, 60, 60, 60, 60, 60, 61], 1)]
    assert rates == [1e-3] * 6 + [5e-4, 5e-4]  # the fifth epoch at 60 after the best 60


# two code paths trained 14 updates from one start: how far their float32 rounding may carry apart
TRAINED_ALIKE = 1e-5


@pytest.mark.long(7)
def test_the_recipes_shortcuts_train_the_same_weights(tiny_copy, tmp_path):
    """Two shortcuts change only the time: the recipe's --num-workers 0 (fairseq's data-loading
    process, --num-workers 1 and its default, hands over the same batches) and the task's Adam
    step on all parameters at once (--no-foreach-adam: fairseq's loop). Two epochs of the recipe
    end in bit-identical weights and optimizer state with either data loader (one code path), and
    in the same weights and state to float rounding with either Adam step (two code paths: their
    rounding differs on some CPUs, and 14 updates carry it on; an update moves a weight by at most
    the learning rate, 1e-3, so a wrong step shows far above TRAINED_ALIKE)."""
    recipe = recipe_options("paper", max_epoch=2)
    states = []
    for name, options_ in (("recipe", recipe), ("worker", with_value(recipe, "--num-workers", 1)),
                           ("loop-adam", [*recipe, "--no-foreach-adam"])):  # fmt: skip
        save = tmp_path / name
        train([str(tiny_copy), "--arch", "gru_monoattn", *options_, "--seed", "3", "--save-dir", str(save),
               "--no-epoch-checkpoints", "--no-progress-bar"])  # fmt: skip
        states.append(torch.load(save / "checkpoint_last.pt", weights_only=False))
    first = states[0]
    assert first["optimizer_history"][-1]["num_updates"] == 2 * 7  # 200 examples, batches of 32
    for other, same_path in ((states[1], True), (states[2], False)):
        assert first["model"].keys() == other["model"].keys()
        moments = [s["last_optimizer_state"]["state"] for s in (first, other)]
        pairs = [(first["model"][k], other["model"][k]) for k in first["model"]]
        pairs += [(moments[0][i][m], moments[1][i][m]) for i in moments[0] for m in ("exp_avg", "exp_avg_sq")]
        for a, b in pairs:
            assert torch.equal(a, b) if same_path else (a - b).abs().max().item() <= TRAINED_ALIKE
