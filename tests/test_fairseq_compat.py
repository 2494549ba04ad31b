"""The fairseq 0.12 fixes the plugin's task applies when it is set up (fairseq_monoattn/fairseq_compat.py;
tests/test_plugin_import.py checks that importing the plugin applies none and the task all)."""

import argparse
import logging
import pickle

import numpy as np
import pytest
import torch
from fairseq.data import data_utils
from fairseq.logging import progress_bar

import fairseq_monoattn  # noqa: F401
from fairseq_monoattn import fairseq_compat
from fairseq_monoattn.testing import assert_same_up_to_rounding


@pytest.fixture(autouse=True, scope="module")
def fixes_applied():
    """As ``LengthGeneralizationTask.setup_task`` applies them (for the rest of the process)."""
    fairseq_compat.apply_fixes()


def test_the_fix_is_applied_exactly_where_fairseq_drops_the_batch():
    """fairseq-fixed 0.12.3.1 (installed here on Python >= 3.11) drops the last batch; fairseq
    0.12.2 does not, and there the plugin leaves batch_by_size alone."""
    patched = getattr(data_utils.batch_by_size, "keeps_last_batch", False)
    original = data_utils.batch_by_size.__wrapped__ if patched else data_utils.batch_by_size
    assert patched == fairseq_compat.drops_last_batch(original)
    assert not fairseq_compat.drops_last_batch(data_utils.batch_by_size)


def test_last_partial_batch_is_kept():
    indices = np.arange(100, dtype=np.int64)
    batches = data_utils.batch_by_size(indices, lambda i: 5, max_sentences=50, required_batch_size_multiple=8)
    assert [len(b) for b in batches] == [48, 48, 4]  # fairseq-fixed 0.12.3.1 alone returns [48, 48]
    assert sorted(np.concatenate(batches).tolist()) == list(range(100))
    sizes = np.full(13, 5, dtype=np.int64)
    batches = data_utils.batch_by_size(
        np.arange(13, dtype=np.int64), None, num_tokens_vec=sizes, max_tokens=1000, required_batch_size_multiple=8
    )
    assert sum(len(b) for b in batches) == 13


def test_namespace_checkpoints_load_with_weights_only(tmp_path):
    path = tmp_path / "state.pt"
    torch.save({"cfg": {"model": argparse.Namespace(arch="transformer_onestep")}}, path)
    assert torch.load(path, weights_only=True)["cfg"]["model"].arch == "transformer_onestep"


def test_the_plugins_readers_allow_namespaces_while_they_read(tmp_path):
    """scoring.read_checkpoint and the experiment records allow the class only inside their ``with``
    block; a process that never set the plugin's task up keeps torch's allow-list as it was."""
    from fairseq_monoattn.checkpoint_classes import reading_fairseq_checkpoints

    path = tmp_path / "state.pt"
    torch.save({"cfg": {"model": argparse.Namespace(arch="transformer_onestep")}}, path)
    saved = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        with reading_fairseq_checkpoints():
            assert torch.load(path, weights_only=True)["cfg"]["model"].arch == "transformer_onestep"
        assert torch.serialization.get_safe_globals() == []
        with pytest.raises(pickle.UnpicklingError, match="Namespace"):
            torch.load(path, weights_only=True)
    finally:
        torch.serialization.add_safe_globals(saved)


def test_log_file_gets_each_progress_line_once(tmp_path):
    log_file = tmp_path / "train.log"
    before, level = list(progress_bar.logger.handlers), progress_bar.logger.level
    progress_bar.logger.setLevel(logging.INFO)
    try:
        for epoch in (1, 2, 3):
            bar = progress_bar.progress_bar([1], log_format="simple", log_file=str(log_file), epoch=epoch)
            bar.print({"loss": 1.0}, tag="valid")
        lines = [line for line in log_file.read_text().splitlines() if "loss" in line]
        assert len(lines) == 3
    finally:
        for handler in progress_bar.logger.handlers[len(before) :]:
            handler.close()
        progress_bar.logger.handlers[:] = before
        progress_bar.logger.setLevel(level)


def test_reseeding_on_a_cpu_only_machine_gives_fairseqs_generator_state():
    """fairseq's trainer reseeds before every update; on a machine whose only device is the CPU
    the plugin seeds the CPU generator alone: the same state as fairseq's set_torch_seed, the
    same draws, the state restored after a ``with`` block; elsewhere fairseq's own is kept."""
    from fairseq import utils

    patched = utils.set_torch_seed
    assert getattr(patched, "cpu_alone", False) == fairseq_compat.cpu_only()
    if not getattr(patched, "cpu_alone", False):
        return  # a machine with an accelerator keeps fairseq's own
    original = patched.__mro__[1]
    for seed in (0, 1, 12345, 2**31 - 1):
        original(seed)
        expected_state, expected = torch.get_rng_state(), torch.rand(5)
        torch.rand(7)  # move the generator on
        patched(seed)
        assert torch.equal(torch.get_rng_state(), expected_state) and torch.equal(torch.rand(5), expected)
    torch.manual_seed(3)
    before = torch.get_rng_state()
    with patched(99):
        inside = torch.rand(2)
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(99)
    assert torch.equal(inside, torch.rand(2))


def test_checkpoint_copies_leave_the_old_file_or_the_new_one_never_a_part(tmp_path, monkeypatch):
    """fairseq makes checkpoint_last.pt by copying checkpoint_best.pt over it; a copy interrupted
    half-way (a kill) must leave the old checkpoint whole."""
    from fairseq import checkpoint_utils

    assert checkpoint_utils.PathManager.copy.atomic  # what fairseq calls is the patched copy
    best, last = tmp_path / "checkpoint_best.pt", tmp_path / "checkpoint_last.pt"
    best.write_bytes(bytes(range(256)) * 400)
    last.write_bytes(b"the previous epoch's checkpoint")
    real_copyfile = fairseq_compat.shutil.copyfile

    def killed_half_way(src, dst):
        with open(src, "rb") as read, open(dst, "wb") as write:
            write.write(read.read(1000))
        raise KeyboardInterrupt

    monkeypatch.setattr(fairseq_compat.shutil, "copyfile", killed_half_way)
    with pytest.raises(KeyboardInterrupt):
        checkpoint_utils.PathManager.copy(str(best), str(last), overwrite=True)
    assert last.read_bytes() == b"the previous epoch's checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_best.pt", "checkpoint_last.pt"]
    monkeypatch.setattr(fairseq_compat.shutil, "copyfile", real_copyfile)
    assert checkpoint_utils.PathManager.copy(str(best), str(last), overwrite=True)
    assert last.read_bytes() == best.read_bytes()
    assert checkpoint_utils.PathManager.copy(str(best), str(tmp_path / "new.pt"))
    assert (tmp_path / "new.pt").read_bytes() == best.read_bytes()


@pytest.mark.parametrize("max_norm", [0.0, 0.5, 1e6])
def test_gradient_clipping_gives_fairseqs_norm_and_gradients(max_norm):
    """The _foreach clipping against fairseq's own loop (functools.wraps keeps it as __wrapped__),
    on gradients of the sizes a model has (a bias, a bias-free matrix, a large embedding): the same
    norm and gradients to float rounding (two code paths, fairseq_monoattn/testing.py)."""
    from fairseq import utils as fairseq_utils

    assert fairseq_utils.clip_grad_norm_.foreach  # what fairseq's optimizers call
    generator = torch.Generator().manual_seed(5)
    shapes = [(1,), (7,), (64, 3), (128, 192), (1000, 64), ()]
    clipped = []
    for clip in (fairseq_utils.clip_grad_norm_, fairseq_utils.clip_grad_norm_.__wrapped__):
        params = [torch.nn.Parameter(torch.zeros(shape)) for shape in shapes]
        generator.manual_seed(5)
        for p, scale in zip(params, (1e-3, 1.0, 3.0, 0.1, 1e-2, 2.0)):
            p.grad = torch.randn(p.shape, generator=generator) * scale
        params.append(torch.nn.Parameter(torch.zeros(3)))  # no gradient: left out of the norm
        norm = clip(params, max_norm)
        clipped.append((norm, [p.grad for p in params[:-1]]))
    (norm, grads), (fairseq_norm, fairseq_grads) = clipped
    assert_same_up_to_rounding(norm, fairseq_norm, "norm")
    assert norm.item() > 1.0
    for index, (a, b) in enumerate(zip(grads, fairseq_grads)):
        assert_same_up_to_rounding(a, b, f"gradient {index}")
    if max_norm == 0.5:
        assert abs(torch.norm(torch.stack([g.norm() for g in grads])).item() - 0.5) < 1e-5
