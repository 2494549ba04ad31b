"""The length_generalization task's array batches are fairseq's batches, tensor for tensor."""

import random

import numpy as np
import pytest
import torch
from fairseq import options, tasks
from fairseq.data import LanguagePairDataset
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq_cli_helpers import USER_DIR, copy_examples

from fairseq_monoattn.data.common import Example
from fairseq_monoattn.data.writer import write_dataset
from fairseq_monoattn.tasks.batches import ArrayPairDataset


@pytest.fixture(scope="module")
def mixed_lengths(tmp_path_factory):
    """Copy pairs of 1-30 digits and pairs whose target is longer than the source, so that
    both sides' padding and the sort by source length are exercised."""
    rng = random.Random(5)
    longer_targets = []
    for _ in range(60):
        digits = [str(rng.randrange(10)) for _ in range(rng.randint(1, 12))]
        longer_targets.append(Example(" ".join(digits), " ".join(digits * 2), len(digits)))
    splits = {"train": copy_examples(rng, 140, 1, 30) + longer_targets, "valid": copy_examples(rng, 9, 1, 4)}
    out = tmp_path_factory.mktemp("batches") / "mixed"
    write_dataset(splits, out, "copy", seed=0)
    return out / "bin"


def task_with(data, *argv):
    args = options.parse_args_and_arch(
        options.get_training_parser(),
        [str(data), "--arch", "gru_onestep", "--task", "length_generalization", "--user-dir", USER_DIR, *argv],
    )
    task = tasks.setup_task(convert_namespace_to_omegaconf(args).task)
    task.load_dataset("train")
    return task


def fairseq_batch(dataset, indices):
    return LanguagePairDataset.collater(dataset, [dataset[i] for i in indices])


def assert_same_batch(got, want):
    assert list(got) == list(want)
    for key, value in want.items():
        if isinstance(value, dict):
            assert_same_batch(got[key], value)
        elif torch.is_tensor(value):
            assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
            assert torch.equal(got[key], value), key
        else:
            assert type(got[key]) is type(value) and got[key] == value, key


def random_batches(count, size, rng):
    return [list(rng.choice(size, size=rng.integers(1, 41), replace=False)) for _ in range(count)]


@pytest.mark.parametrize(
    "options_", [[], ["--left-pad-source"], ["--left-pad-target"]], ids=["default", "source-right", "target-left"]
)
def test_array_batches_equal_fairseqs_collate(mixed_lengths, options_):
    """fairseq's flags: --left-pad-source turns the source's left padding off, --left-pad-target
    turns the target's on."""
    dataset = task_with(mixed_lengths, *options_).dataset("train")
    assert type(dataset) is ArrayPairDataset
    assert (dataset.left_pad_source, dataset.left_pad_target) == {
        "": (True, False),
        "--left-pad-source": (False, False),
        "--left-pad-target": (True, True),
    }["".join(options_)]
    for indices in random_batches(40, len(dataset), np.random.default_rng(0)):
        assert_same_batch(dataset.collater(dataset.__getitems__(indices)), fairseq_batch(dataset, indices))


def test_a_list_of_examples_is_still_collated_by_fairseq(mixed_lengths):
    dataset = task_with(mixed_lengths).dataset("train")
    samples = [dataset[i] for i in (3, 150, 7)]
    assert_same_batch(dataset.collater(samples), LanguagePairDataset.collater(dataset, samples))
    assert dataset.collater([]) == {}


def test_without_input_feeding_there_is_no_decoder_input(mixed_lengths):
    plain = task_with(mixed_lengths).dataset("train")
    dataset = ArrayPairDataset.from_dataset(
        LanguagePairDataset(
            plain.src, plain.src_sizes, plain.src_dict, plain.tgt, plain.tgt_sizes, plain.tgt_dict, input_feeding=False
        )
    )
    batch = dataset.collater(dataset.__getitems__([4, 0, 199]))
    assert "prev_output_tokens" not in batch["net_input"]
    assert_same_batch(batch, fairseq_batch(dataset, [4, 0, 199]))


def test_datasets_the_array_batches_do_not_reproduce_are_left_to_fairseq(mixed_lengths):
    plain = task_with(mixed_lengths).dataset("train")
    sides = (plain.src, plain.src_sizes, plain.src_dict, plain.tgt, plain.tgt_sizes, plain.tgt_dict)
    for options_ in ({"remove_eos_from_source": True}, {"append_bos": True}, {"pad_to_multiple": 8}):
        dataset = LanguagePairDataset(*sides, **options_)
        assert ArrayPairDataset.from_dataset(dataset) is dataset, options_
    source_only = LanguagePairDataset(plain.src, plain.src_sizes, plain.src_dict)
    assert ArrayPairDataset.from_dataset(source_only) is source_only


@pytest.mark.parametrize("workers", [0, 1])
def test_an_epochs_batches_through_the_data_loader_are_fairseqs(mixed_lengths, workers):
    """Through the task's iterator (the data loader calls __getitems__, in a worker process
    with --num-workers 1) the epoch's batches are those of fairseq's collate, in order."""
    task = task_with(mixed_lengths, "--batch-size", "16")
    dataset = task.dataset("train")
    iterator = task.get_batch_iterator(dataset, max_sentences=16, seed=3, num_workers=workers, epoch=2)
    drawn = [list(indices) for indices in iterator.frozen_batches]
    batches = list(iterator.next_epoch_itr(shuffle=False))
    assert len(batches) == len(drawn) == 13 and sum(len(indices) for indices in drawn) == len(dataset)
    for batch, indices in zip(batches, drawn):
        assert_same_batch(batch, fairseq_batch(dataset, indices))
