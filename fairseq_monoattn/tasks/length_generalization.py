"""``--task length_generalization``: fairseq's translation task (same data layout, same
options) with defaults that never drop long examples and greedy exact-match validation.

* ``--max-source-positions`` / ``--max-target-positions`` default to no limit instead of 1024,
  so long test inputs are neither filtered (training) nor rejected (validation).
* ``--stop-after-perfect K`` ends training once greedy valid accuracy has been 100 for K
  validations in a row (the model can only tie from then on; it keeps CPU sweeps short).
* ``--train-batches random`` draws new random batches of ``--batch-size`` examples (mixed
  lengths) every epoch, as a plain ``DataLoader(shuffle=True)`` does; ``sorted`` (fairseq's
  way) makes batches of similar length whose contents stay fixed from epoch to epoch (only
  their order changes).
* fairseq's ``--optimizer adam`` step is taken with torch's ``_foreach`` operations, all
  parameters in one call per operation: the same numbers (to float rounding), in less time (float32
  and fairseq's plain Adam only; otherwise, or with ``--no-foreach-adam``, fairseq's own step).
* ``--eval-accuracy`` greedy-decodes every validation batch and logs ``accuracy`` (percent
  of outputs equal to the target, EOS included) and ``edit_distance`` (mean, NLTK), both from
  counts summed over batches and workers.  Select checkpoints on it with
  ``--best-checkpoint-metric accuracy --maximize-best-checkpoint-metric``; checkpoint_best.pt,
  ``--patience`` and ``--lr-scheduler reduce_lr_on_plateau`` then follow it.  A model with a
  direction gate also logs ``direction_gate`` (the mean gate g over the validation sources: 1
  reads the encodings forward, 0 reversed) and ``reads_forward`` (percent of sources with
  g > 0.5), so a run's log shows when the reading direction settles.  With the ``seq_acc``
  criterion and the plugin's models the teacher-forced pass behind the validation loss is taken
  from the greedy decoding for every example decoded right (``valid_step_from_decoding``).
* Setting the task up applies the plugin's fixes to fairseq for the rest of the process (the
  last partial batch kept, one handler per log file, atomic checkpoint copies, cheaper CPU
  seeding and clipping, glibc's malloc thresholds, one-line plugin errors, the checkpoint
  allow-list: ``fairseq_compat.py``); importing the plugin applies none of them.
* fairseq-generate and fairseq-interactive decode with the plugin's beam search
  (:class:`~fairseq_monoattn.generation.BeamSearch`): a sentence ends only when no unfinished
  hypothesis can still beat its best finished one (fairseq's ends it once ``--beam`` hypotheses
  ended), in float64 (``--generation-precision``), each example's length limit from its own
  source, so that an output does not depend on the batch (docs/fairseq.md).
"""

import functools
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from fairseq import utils
from fairseq.data import iterators
from fairseq.dataclass import ChoiceEnum
from fairseq.logging import metrics
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II

from ..criterions.sequence_accuracy import GATE_COUNTS, scores_given_outputs
from ..dictionaries import check_task_state
from ..errors import PluginError
from ..generation import PRECISIONS, BeamSearch, GenerationOptionError
from ..limits import NO_LENGTH_LIMIT
from ..metrics import (
    GreedyDecoder,
    Tally,
    greedy_generator,
    greedy_hypotheses,
    strip_pad_rows,
    summed_ratio,
    teacher_forced_rows,
    wrong_rows,
)
from ..optim import foreach_adam_step
from ..recipes import DATASET_OPTIONS, TASK_DEFAULTS, option_words
from ..training_notes import warn_once
from .batches import ArrayPairDataset

logger = logging.getLogger(__name__)

TRAIN_BATCHES = ("sorted", "random")

SAMPLES_TO_PRINT = 3

# logging-output key -> hidden meter summed over batches and workers
GREEDY_COUNTS = {"_acc_correct": "correct", "_acc_total": "size", "_acc_edit_distance": "edit_distance"}
MAXIMIZED = {"accuracy", "exact_match", "token_acc"}
MINIMIZED = {"loss", "nll_loss", "ppl", "edit_distance"}


@dataclass
class LengthGeneralizationConfig(TranslationConfig):
    max_source_positions: int = field(
        default=NO_LENGTH_LIMIT, metadata={"help": "max number of tokens in the source sequence"}
    )
    max_target_positions: int = field(
        default=NO_LENGTH_LIMIT, metadata={"help": "max number of tokens in the target sequence"}
    )
    stop_after_perfect: int = field(
        default=TASK_DEFAULTS["stop_after_perfect"],
        metadata={
            "help": "stop training once greedy valid accuracy has been 100 for this many validations "
            "in a row (0: never); needs --best-checkpoint-metric accuracy"
        },
    )
    train_batches: ChoiceEnum(TRAIN_BATCHES) = field(
        default=TASK_DEFAULTS["train_batches"],
        metadata={
            "help": "training batches: 'sorted', fairseq's batches of similar length with the same contents "
            "every epoch, or 'random', new draws of --batch-size examples (mixed lengths) every epoch"
        },
    )
    eval_accuracy: bool = field(
        default=False,
        metadata={"help": "greedy-decode the validation set and log exact-match accuracy and edit distance"},
    )
    eval_accuracy_print_samples: bool = field(
        default=False, metadata={"help": "log a few hypothesis/target pairs at each validation"}
    )
    no_foreach_adam: bool = field(
        default=False,
        metadata={
            "help": "take fairseq's own --optimizer adam step, a Python loop over the parameters, instead of the "
            "same update applied to all of them at once with torch's _foreach operations (the same numbers)"
        },
    )
    generation_precision: ChoiceEnum(list(PRECISIONS)) = field(
        default="float64",
        metadata={
            "help": "the models' float type while fairseq-generate decodes (the scorer's default, float64: "
            "float32's rounding depends on the batch and can flip a near tie)"
        },
    )
    valid_subset: str = II("dataset.valid_subset")
    best_checkpoint_metric: str = II("checkpoint.best_checkpoint_metric")
    maximize_best_checkpoint_metric: bool = II("checkpoint.maximize_best_checkpoint_metric")
    # read to refuse a precision this machine cannot train in (check_precision)
    fp16: bool = II("common.fp16")
    bf16: bool = II("common.bf16")
    cpu: bool = II("common.cpu")
    tpu: bool = II("common.tpu")


class TaskOptionError(PluginError, ValueError):
    """Task options that cannot work together or on this machine; the message names the option."""


def _common_flag(cfg, name: str) -> bool:
    """cfg.NAME, a task config field read from common.NAME; False where no common config resolves it."""
    try:
        return bool(getattr(cfg, name, False))
    except Exception:  # a task config without its parent (omegaconf cannot resolve the interpolation)
        return False


def check_precision(cfg: LengthGeneralizationConfig) -> None:
    """Refuse a half precision fairseq cannot train in here, before any work: --fp16 without a CUDA
    device, fairseq's FP16Optimizer failing once training starts ('Torch not compiled with CUDA');
    --bf16 on a TPU (fairseq-train's --bf16 implies --tpu) without torch_xla, the trainer failing
    ('NoneType' object has no attribute 'xla_device').  Everything else is fairseq's to run: --fp16
    on a CUDA device, bfloat16 without --tpu (hydra's common.bf16=true) on the CPU or a GPU, --bf16
    with torch_xla."""
    import torch
    from fairseq import utils as fairseq_utils

    no_cuda = "--cpu was given" if _common_flag(cfg, "cpu") else "torch has no CUDA device here"
    has_cuda = torch.cuda.is_available() and not _common_flag(cfg, "cpu")
    if _common_flag(cfg, "fp16") and not has_cuda:
        raise TaskOptionError(f"--fp16: fairseq trains in float16 on a CUDA device only, and {no_cuda}; drop --fp16")
    if _common_flag(cfg, "bf16") and _common_flag(cfg, "tpu") and getattr(fairseq_utils, "xm", None) is None:
        raise TaskOptionError(
            "--bf16: fairseq-train's --bf16 implies --tpu, a TPU through torch_xla, which is not installed here; "
            "drop --bf16 (fairseq-hydra-train's common.bf16=true trains in bfloat16 without a TPU)"
        )


def check_model_name(model_cfg) -> None:
    """A model config naming no registered model or architecture (a misspelt hydra ``model._name``)
    is refused naming it and the close matches; fairseq would fail formatting its own message
    (KeyError "'_name'")."""
    import difflib

    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    name = getattr(model_cfg, "_name", None) or getattr(model_cfg, "arch", None)
    if not isinstance(name, str) or name in ARCH_MODEL_REGISTRY or name in MODEL_REGISTRY:
        return
    option = "model._name" if getattr(model_cfg, "_name", None) else "--arch"
    close = difflib.get_close_matches(name, [*ARCH_MODEL_REGISTRY, *MODEL_REGISTRY], n=5, cutoff=0.75)
    known = f"close matches: {', '.join(close)}" if close else "fairseq-train --help lists the architectures"
    raise TaskOptionError(f"{option}={name}: no model or preset of that name is registered; {known}")


def check_checkpoint_metric(cfg: LengthGeneralizationConfig):
    """Fail early on settings fairseq would only trip over (or silently get wrong) later."""
    metric = cfg.best_checkpoint_metric
    if metric in ("accuracy", "edit_distance") and not cfg.eval_accuracy:
        raise TaskOptionError(f"--best-checkpoint-metric {metric} needs --eval-accuracy")
    if metric in MAXIMIZED and not cfg.maximize_best_checkpoint_metric:
        raise TaskOptionError(f"--best-checkpoint-metric {metric} needs --maximize-best-checkpoint-metric")
    if metric in MINIMIZED and cfg.maximize_best_checkpoint_metric is True:
        raise TaskOptionError(f"--best-checkpoint-metric {metric} is minimised: drop --maximize-best-checkpoint-metric")
    if cfg.stop_after_perfect and metric != "accuracy":
        raise TaskOptionError(
            "--stop-after-perfect watches greedy valid accuracy: it needs --eval-accuracy and "
            "--best-checkpoint-metric accuracy"
        )


PERFECT_ACCURACY = 100.0


def stop_after_perfect_validations() -> None:
    """Make fairseq-train stop once the best-checkpoint metric (greedy valid accuracy) has been
    100 for ``--stop-after-perfect`` validations in a row.  fairseq has no hook for a stopping rule
    and its training loop looks ``should_stop_early`` up globally, so it is wrapped, once per
    process; the wrapper takes the count from the configuration it is called with, so a run of a
    task without the option (fairseq's own) gets fairseq's rule alone, and fairseq's own
    --patience rule keeps working inside it.  Each call starts the count of a new run."""
    from fairseq_cli import train as train_cli

    if hasattr(train_cli.should_stop_early, "perfect_in_a_row"):
        train_cli.should_stop_early.perfect_in_a_row = 0
        return
    original = train_cli.should_stop_early

    @functools.wraps(original)
    def should_stop_early(cfg, valid_loss):
        stop = original(cfg, valid_loss)
        count = getattr(cfg.task, "stop_after_perfect", 0)
        if not count or valid_loss is None:
            return stop
        should_stop_early.perfect_in_a_row = (
            should_stop_early.perfect_in_a_row + 1 if valid_loss >= PERFECT_ACCURACY else 0
        )
        if should_stop_early.perfect_in_a_row >= count:
            logger.info(f"stopping: greedy valid accuracy has been 100 for {count} validations")
            return True
        return stop

    should_stop_early.perfect_in_a_row = 0
    train_cli.should_stop_early = should_stop_early


class MissingSide(PluginError, FileNotFoundError):
    """A split without one of its sides."""


def warn_about_training(task_cfg, model_cfg) -> None:
    """Say, once, when a model is trained in a way known to break the paper's results, and which
    options to add (docs/results/training-settings.md has the runs behind each).  Sorted batches
    are the model's to say (training_notes.py), under every task."""
    name = getattr(model_cfg, "_name", None) or getattr(model_cfg, "arch", "the model")
    notes = []
    if task_cfg.best_checkpoint_metric == "loss":
        notes.append(
            "checkpoint_best.pt follows the validation loss; the paper selects by exact match, and greedy "
            "exact match follows accuracy at long lengths best: add --eval-accuracy --best-checkpoint-metric "
            "accuracy --maximize-best-checkpoint-metric"
        )
    notes += dataset_notes(task_cfg, model_cfg)
    for note in notes:
        warn_once(name, note)


def prepared_task(data: str):
    """The probing task whose data fairseq-monoattn-prepare wrote to DATA/bin (its manifest.json
    is in DATA), or None for other data."""
    manifest = Path(str(data).split(":")[0]).parent / "manifest.json"
    try:
        return json.loads(manifest.read_text()).get("task")
    except (OSError, ValueError, AttributeError):
        return None


def dataset_notes(task_cfg, model_cfg) -> list:
    """What a model trained on a prepared task's data lacks of the options that data calls for
    (:data:`~fairseq_monoattn.recipes.DATASET_OPTIONS`)."""
    task = prepared_task(getattr(task_cfg, "data", "") or "")
    if task not in DATASET_OPTIONS:
        return []
    wanted = {
        field: value
        for field, value in DATASET_OPTIONS[task].options.items()
        if hasattr(model_cfg, field) and getattr(model_cfg, field) != value
    }
    if not wanted:
        return []
    options = " ".join(option_words(wanted))
    return [f"the data is {task}'s (its manifest.json) and {DATASET_OPTIONS[task].reason}: add {options}"]


def longest_target(sample, pad: int) -> int:
    return int(sample["target"].ne(pad).sum(dim=1).max())


@register_task("length_generalization", dataclass=LengthGeneralizationConfig)
class LengthGeneralizationTask(TranslationTask):
    cfg: LengthGeneralizationConfig

    def __init__(self, cfg: LengthGeneralizationConfig, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self.samples_left_to_print = SAMPLES_TO_PRINT

    @classmethod
    def setup_task(cls, cfg: LengthGeneralizationConfig, **kwargs):
        # choosing this task chooses the plugin's fixes to fairseq (they hold for the process:
        # fairseq looks the functions up globally, and the plugin's errors print as one line from
        # here on); importing the plugin applies none
        from ..fairseq_compat import apply_fixes

        apply_fixes()
        if not kwargs.get("from_checkpoint"):  # a checkpoint trained in float16 on a GPU still loads here
            check_precision(cfg)
        check_checkpoint_metric(cfg)
        if cfg.stop_after_perfect:
            stop_after_perfect_validations()
        return super().setup_task(cfg, **kwargs)

    def build_model(self, cfg, from_checkpoint=False):
        check_model_name(cfg)
        model = super().build_model(cfg, from_checkpoint)
        if not from_checkpoint:
            warn_about_training(self.cfg, cfg)
        if self.cfg.eval_accuracy:
            # greedy, no minimum length (EOS may come first); max_len_b is set per batch
            self.greedy_generator = greedy_generator([model], self.target_dictionary)
        return model

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, prefix_allowed_tokens_fn=None):
        """The plugin's beam search (``generation.py``); fairseq's scorer for --score-reference and
        fairseq's sampling for --sampling (whose samples need no stopping rule).  Options the
        plugin's search does not take are refused by name rather than decoded another way."""
        if getattr(args, "score_reference", False) or getattr(args, "sampling", False):
            return super().build_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn)
        unsupported = {
            "--diverse-beam-groups": getattr(args, "diverse_beam_groups", -1) > 0,
            "--diversity-rate": getattr(args, "diversity_rate", -1) > -1,
            "--match-source-len": getattr(args, "match_source_len", False),
            "--constraints": bool(getattr(args, "constraints", False)),
            "--no-repeat-ngram-size": getattr(args, "no_repeat_ngram_size", 0) > 0,
            "--prefix-size": getattr(args, "prefix_size", 0) > 0,
            "--lm-path": (extra_gen_cls_kwargs or {}).get("lm_model") is not None,
            "--print-step": getattr(args, "print_step", False),
            "a prefix_allowed_tokens_fn": (prefix_allowed_tokens_fn or getattr(args, "prefix_allowed_tokens_fn", None))
            is not None,
            "a seq_gen_cls": seq_gen_cls is not None,
        }
        named = [option for option, given in unsupported.items() if given]
        if named:
            raise GenerationOptionError(
                f"--task length_generalization decodes with the plugin's beam search, which does not take "
                f"{', '.join(named)}; use --task translation for fairseq's SequenceGenerator"
            )
        return BeamSearch(
            models,
            self.target_dictionary,
            beam_size=getattr(args, "beam", 5),
            nbest=getattr(args, "nbest", 1),
            max_len_a=getattr(args, "max_len_a", 0),
            max_len_b=getattr(args, "max_len_b", 200),
            min_len=getattr(args, "min_len", 1),
            len_penalty=getattr(args, "lenpen", 1),
            unk_penalty=getattr(args, "unkpen", 0),
            temperature=getattr(args, "temperature", 1.0),
            print_alignment=getattr(args, "print_alignment", None),
            precision=self.cfg.generation_precision,
        )

    def get_batch_iterator(
        self,
        dataset,
        max_tokens=None,
        max_sentences=None,
        max_positions=None,
        ignore_invalid_inputs=False,
        required_batch_size_multiple=1,
        seed=1,
        num_shards=1,
        shard_id=0,
        num_workers=0,
        epoch=1,
        data_buffer_size=0,
        disable_iterator_cache=False,
        **kwargs,
    ):
        if not (self.cfg.train_batches == "random" and dataset is self.datasets.get(self.cfg.train_subset)):
            return super().get_batch_iterator(
                dataset,
                max_tokens=max_tokens,
                max_sentences=max_sentences,
                max_positions=max_positions,
                ignore_invalid_inputs=ignore_invalid_inputs,
                required_batch_size_multiple=required_batch_size_multiple,
                seed=seed,
                num_shards=num_shards,
                shard_id=shard_id,
                num_workers=num_workers,
                epoch=epoch,
                data_buffer_size=data_buffer_size,
                disable_iterator_cache=disable_iterator_cache,
                **kwargs,
            )
        if max_sentences is None or max_tokens is not None:
            raise ValueError(
                "--train-batches random (the default) draws --batch-size examples per batch: give --batch-size and "
                "no --max-tokens, or --train-batches sorted for fairseq's batches of similar lengths"
            )
        keep = np.arange(len(dataset))
        if max_positions is not None:
            keep = self.filter_indices_by_size(keep, dataset, max_positions, ignore_invalid_inputs)

        def random_batches(dataset, epoch):
            """A fresh permutation of the training examples for each epoch, cut into batches."""
            order = keep[np.random.default_rng([seed, epoch]).permutation(len(keep))]
            return [order[i : i + max_sentences] for i in range(0, len(order), max_sentences)]

        dataset.set_epoch(epoch)
        # fairseq-train asks for a new iterator every epoch; fairseq 0.12's default of persistent
        # workers would leave each epoch's data-loading process alive to the end of the run
        return iterators.EpochBatchIterator(
            dataset=dataset,
            collate_fn=dataset.collater,
            batch_sampler=random_batches,
            seed=seed,
            num_shards=num_shards,
            shard_id=shard_id,
            num_workers=num_workers,
            epoch=epoch,
            buffer_size=data_buffer_size,
            persistent_workers=False,
        )

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        """fairseq's loader, after checking that both sides of the split are there: a training or
        validation split without its target side would otherwise train a whole epoch and then
        fail in the criterion.  Its batches are fairseq's, gathered with array operations
        (``batches.py``)."""
        data = Path(utils.split_paths(self.cfg.data)[0])
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        needs_target = split == self.cfg.train_subset or split in str(self.cfg.valid_subset).split(",")
        sides = (src, tgt) if needs_target else (src,)
        for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
            present = [lang for lang in sides if (data / f"{split}.{pair}.{lang}.idx").is_file()]
            if present:
                break
        missing = [lang for lang in sides if lang not in present]
        if present and missing:
            raise MissingSide(
                f"{data / f'{split}.{pair}.{missing[0]}.idx'}: split {split!r} has no {missing[0]} side "
                f"(its {present[0]} side is there); training and validation need both"
            )
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        self.datasets[split] = ArrayPairDataset.from_dataset(self.datasets[split])

    @property
    def random_training_batches(self) -> bool:
        """Whether the training batches are new random draws of mixed lengths every epoch (the
        models warn when a location preset trains on sorted ones: training_notes.py)."""
        return self.cfg.train_batches == "random"

    def load_state_dict(self, state_dict):
        """A checkpoint's task state (fairseq loads it before building the model).  The models keep
        their dictionaries (dictionaries.py); this task's checkpoints from before kept them here."""
        super().load_state_dict(check_task_state(self, state_dict))

    def optimizer_step(self, optimizer, model, update_num):
        # fairseq's Adam, to float rounding, in one call per operation (optim/foreach_adam.py)
        if self.cfg.no_foreach_adam or not foreach_adam_step(optimizer):
            super().optimizer_step(optimizer, model, update_num)

    def begin_valid_epoch(self, epoch, model):
        super().begin_valid_epoch(epoch, model)
        self.samples_left_to_print = SAMPLES_TO_PRINT

    def valid_step(self, sample, model, criterion):
        if not self.cfg.eval_accuracy:
            return super().valid_step(sample, model, criterion)
        if isinstance(self.greedy_generator, GreedyDecoder) and scores_given_outputs(criterion):
            return self.valid_step_from_decoding(sample, model, criterion)
        # the teacher-forced pass (the criterion's) and greedy decoding read the same encoder
        # output of the same sources (evaluation mode: no dropout): compute it once
        encoder_outputs = []
        hook = model.encoder.register_forward_hook(lambda _module, _args, out: encoder_outputs.append(out))
        try:
            loss, sample_size, logging_output = super().valid_step(sample, model, criterion)
        finally:
            hook.remove()
        encoder_out = encoder_outputs[0] if len(encoder_outputs) == 1 and not model.training else None
        tally = self.greedy_tally(sample, model, encoder_out)
        logging_output.update({key: getattr(tally, attribute) for key, attribute in GREEDY_COUNTS.items()})
        return loss, sample_size, logging_output

    def valid_step_from_decoding(self, sample, model, criterion):
        """``valid_step`` with the teacher-forced pass taken from the greedy decoding where it can
        be: an output equal to its target (EOS included) was decoded through the teacher-forced
        steps on that target, so its logits are kept from the decoding (the same numbers as the
        full pass to float rounding, as incremental decoding is), and only the examples decoded
        wrong get a teacher-forced pass of the decoder, on the same encoder output.  The criterion
        scores the assembled output as its own."""
        model.eval()
        net_input = sample["net_input"]
        with torch.no_grad():
            encoder_out = model.encoder(net_input["src_tokens"], src_lengths=net_input["src_lengths"])
            self.limit_outputs(sample)
            decoded = self.greedy_generator.decode([model], sample, encoder_out, logits=True)
            target = sample["target"]
            width = min(decoded.logits.size(1), target.size(1))
            logits = decoded.logits.new_zeros(target.size(0), target.size(1), decoded.logits.size(2))
            logits[:, :width] = decoded.logits[:, :width]
            rows = wrong_rows(decoded.hypotheses, target, self.tgt_dict.pad())
            if len(rows):
                forced, _ = teacher_forced_rows(model, sample, encoder_out, rows)
                logits.index_copy_(0, rows, forced)
            loss, sample_size, logging_output = criterion.score_output(
                model, sample, (logits, {"direction": decoded.direction})
            )
        tally = self.tally(sample, decoded.hypotheses)
        logging_output.update({key: getattr(tally, attribute) for key, attribute in GREEDY_COUNTS.items()})
        return loss, sample_size, logging_output

    def limit_outputs(self, sample):
        """Greedy outputs of the batch stop after (longest target of the batch) + 1 tokens, EOS
        included: an output still running by then is longer than every target of the batch, so it
        is wrong whatever it would have become (exact match is unaffected; its edit distance is
        that of the cut output, a lower bound of the uncut one)."""
        # at most max_len_b tokens before the EOS the generator forces
        self.greedy_generator.max_len_b = longest_target(sample, self.tgt_dict.pad())

    def greedy_tally(self, sample, model, encoder_out=None) -> Tally:
        """Greedy outputs of one batch (``limit_outputs``) scored against its targets."""
        self.limit_outputs(sample)
        return self.tally(sample, greedy_hypotheses(self.greedy_generator, [model], sample, encoder_out))

    def tally(self, sample, hypotheses) -> Tally:
        """The batch's outputs ``hypotheses`` (token ids, EOS included) scored against its targets."""
        targets = strip_pad_rows(sample["target"], self.tgt_dict.pad())
        tally = Tally()
        tally.add(hypotheses, targets, self.tgt_dict.eos())
        if self.cfg.eval_accuracy_print_samples:
            self.print_samples(hypotheses, targets)
        return tally

    def print_samples(self, hypotheses, targets):
        count = min(self.samples_left_to_print, len(targets))
        for hypothesis, target in zip(hypotheses[:count], targets[:count]):
            logger.info(f"greedy hypothesis: {self.tgt_dict.string(hypothesis, include_eos=True)}")
            logger.info(f"target:            {self.tgt_dict.string(target, include_eos=True)}")
        self.samples_left_to_print -= count

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        if not any("_acc_total" in log for log in logging_outputs):
            return  # a training step, or validation without --eval-accuracy
        for key in GREEDY_COUNTS:
            metrics.log_scalar_sum(key, utils.item(sum(log.get(key, 0) for log in logging_outputs)))
        # accuracy = 100 * correct / total; edit_distance = summed distance / total
        metrics.log_derived("accuracy", lambda m: summed_ratio(m, "_acc_correct", "_acc_total", 100.0))
        metrics.log_derived("edit_distance", lambda m: summed_ratio(m, "_acc_edit_distance", "_acc_total"))
        metrics.log_derived("acc_total", lambda m: m["_acc_total"].sum)  # examples scored, all of valid
        if any("_gate_total" in log for log in logging_outputs):
            for key in GATE_COUNTS:
                metrics.log_scalar_sum(key, utils.item(sum(log.get(key, 0) for log in logging_outputs)))
            # direction_gate = mean g; reads_forward = 100 * #(g > 0.5) / #sources
            metrics.log_derived("direction_gate", lambda m: summed_ratio(m, "_gate_sum", "_gate_total"))
            metrics.log_derived("reads_forward", lambda m: summed_ratio(m, "_gate_forward", "_gate_total", 100.0))
