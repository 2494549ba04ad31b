"""The length_generalization task's Adam step is fairseq's: the same parameters and moments to float
rounding (``_foreach`` kernels against fairseq's loop over tensors, so not bit for bit on every CPU:
fairseq_monoattn/testing.py)."""

import argparse
import copy
from unittest import mock

import pytest
import torch
from fairseq.optim.adam import Adam, FairseqAdam, FairseqAdamConfig
from fairseq.optim.sgd import SGD

from fairseq_monoattn.optim import foreach_adam_step
from fairseq_monoattn.testing import assert_same_up_to_rounding

SHAPES = [(7, 5), (5,), (3, 4, 2), (1,), (6, 6)]


def parameters(dtype=torch.float32):
    generator = torch.Generator().manual_seed(3)
    return [torch.nn.Parameter(torch.randn(shape, generator=generator, dtype=dtype)) for shape in SHAPES]


def fairseq_adam(params, lr=1e-3, weight_decay=0.0, betas="(0.9, 0.98)"):
    cfg = FairseqAdamConfig(lr=[lr], adam_betas=betas, adam_eps=1e-6, weight_decay=weight_decay, tpu=False)
    return FairseqAdam(cfg, params)


def set_gradients(params, step, skip=()):
    generator = torch.Generator().manual_seed(100 + step)
    for index, p in enumerate(params):
        grad = torch.randn(p.shape, generator=generator, dtype=p.dtype)
        p.grad = None if index in skip else grad


def assert_same(reference, tested, reference_params, tested_params):
    for index, (a, b) in enumerate(zip(reference_params, tested_params)):
        assert_same_up_to_rounding(b, a, f"parameter {index}")
    state_a = reference.optimizer.state_dict()["state"]
    state_b = tested.optimizer.state_dict()["state"]
    assert state_a.keys() == state_b.keys()
    for key in state_a:
        assert state_a[key]["step"] == state_b[key]["step"]
        assert_same_up_to_rounding(state_b[key]["exp_avg"], state_a[key]["exp_avg"], f"exp_avg {key}")
        assert_same_up_to_rounding(state_b[key]["exp_avg_sq"], state_a[key]["exp_avg_sq"], f"exp_avg_sq {key}")


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_equals_fairseqs_adam_step_by_step(weight_decay):
    ours_params, theirs_params = parameters(), parameters()
    ours = fairseq_adam(ours_params, weight_decay=weight_decay)
    theirs = fairseq_adam(theirs_params, weight_decay=weight_decay)
    for step in range(12):
        if step == 6:  # the learning rate changes as a scheduler would change it
            ours.set_lr(3e-4)
            theirs.set_lr(3e-4)
        skip = (1,) if step in (2, 3) else ()  # a parameter without a gradient keeps its step count
        set_gradients(ours_params, step, skip)
        set_gradients(theirs_params, step, skip)
        assert foreach_adam_step(ours)
        theirs.step()
        assert_same(theirs, ours, theirs_params, ours_params)
    assert ours.optimizer.state_dict()["state"][1]["step"] == 10
    assert not torch.equal(ours_params[0], parameters()[0])  # it did train


def test_continues_a_state_saved_by_fairseqs_adam():
    theirs_params = parameters()
    theirs = fairseq_adam(theirs_params)
    for step in range(3):
        set_gradients(theirs_params, step)
        theirs.step()
    ours_params = [torch.nn.Parameter(p.detach().clone()) for p in theirs_params]
    ours = fairseq_adam(ours_params)
    ours.load_state_dict(copy.deepcopy(theirs.state_dict()))
    for step in range(3, 6):
        set_gradients(ours_params, step)
        set_gradients(theirs_params, step)
        assert foreach_adam_step(ours)
        theirs.step()
    assert_same(theirs, ours, theirs_params, ours_params)


def untouched(optimizer, params):
    before = [p.detach().clone() for p in params]
    assert not foreach_adam_step(optimizer)
    assert all(torch.equal(a, b) for a, b in zip(before, params))
    assert len(optimizer.optimizer.state) == 0


def test_leaves_other_settings_to_fairseq():
    params = parameters()
    set_gradients(params, 0)
    amsgrad = fairseq_adam(params)
    amsgrad.optimizer.param_groups[0]["amsgrad"] = True
    untouched(amsgrad, params)

    double = parameters(torch.float64)
    set_gradients(double, 0)
    untouched(fairseq_adam(double), double)

    hooked = fairseq_adam(params)
    handle = hooked.optimizer.register_step_post_hook(lambda *args: None)
    untouched(hooked, params)
    handle.remove()
    assert foreach_adam_step(hooked)

    untouched(SGD(argparse.Namespace(lr=[0.1], momentum=0.0, weight_decay=0.0), params), params)


def test_the_task_takes_the_step_and_can_leave_it_to_fairseq():
    from fairseq_monoattn.tasks.length_generalization import LengthGeneralizationTask

    task = LengthGeneralizationTask.__new__(LengthGeneralizationTask)
    params = parameters()
    set_gradients(params, 0)
    optimizer = fairseq_adam(params)
    for no_foreach, fairseq_calls in ((False, 0), (True, 1)):
        task.cfg = mock.Mock(no_foreach_adam=no_foreach)
        with mock.patch.object(Adam, "step", autospec=True) as fairseq_step:
            task.optimizer_step(optimizer, model=None, update_num=0)
        assert fairseq_step.call_count == fairseq_calls
    assert optimizer.optimizer.state_dict()["state"][0]["step"] == 1


def test_torch_adamw_adds_epsilon_after_the_bias_correction_where_fairseqs_adam_adds_it_before():
    """--optimizer torch_adamw (the release's optimizer) against fairseq's adam, three steps on
    gradients from 1e-10 to 1, each parameter's value computed by hand in float64: torch's
    p - lr/c1 * m / (sqrt(v / c2) + eps) and fairseq's p - lr * sqrt(c2)/c1 * m / (sqrt(v) + eps).
    At gradients near eps the two differ by orders of magnitude in the first steps."""
    import math

    from fairseq.optim import OPTIMIZER_REGISTRY

    from fairseq_monoattn.optim.torch_adamw import TorchAdamW, TorchAdamWConfig

    assert OPTIMIZER_REGISTRY["torch_adamw"] is TorchAdamW
    lr, (beta1, beta2), eps = 1e-3, (0.9, 0.999), 1e-8
    gradients = torch.tensor([1e-10, 1e-8, 1e-6, 1.0, -1e-9], dtype=torch.float64)
    start = torch.linspace(-1, 1, len(gradients), dtype=torch.float64)
    ours_param = torch.nn.Parameter(start.clone())
    fairseq_param = torch.nn.Parameter(start.clone())
    ours = TorchAdamW(TorchAdamWConfig(lr=[lr], adam_betas="(0.9, 0.999)", adam_eps=eps), [ours_param])
    assert isinstance(ours.optimizer, torch.optim.AdamW)
    theirs = FairseqAdam(
        FairseqAdamConfig(lr=[lr], adam_betas="(0.9, 0.999)", adam_eps=eps, weight_decay=0.0, tpu=False),
        [fairseq_param],
    )
    expected_ours, expected_fairseq = start.tolist(), start.tolist()
    m = [0.0] * len(gradients)
    v = [0.0] * len(gradients)
    for t in range(1, 4):
        ours_param.grad = gradients.clone()
        fairseq_param.grad = gradients.clone()
        ours.step()
        theirs.step()
        c1, c2 = 1 - beta1**t, 1 - beta2**t
        for i, g in enumerate(gradients.tolist()):
            m[i] = beta1 * m[i] + (1 - beta1) * g
            v[i] = beta2 * v[i] + (1 - beta2) * g * g
            expected_ours[i] -= lr / c1 * m[i] / (math.sqrt(v[i] / c2) + eps)
            expected_fairseq[i] -= lr * math.sqrt(c2) / c1 * m[i] / (math.sqrt(v[i]) + eps)
        assert ours_param.tolist() == pytest.approx(expected_ours, rel=1e-12, abs=1e-15)
        assert fairseq_param.tolist() == pytest.approx(expected_fairseq, rel=1e-12, abs=1e-15)
    moved_ours = (start - ours_param.detach()).abs().tolist()
    moved_fairseq = (start - fairseq_param.detach()).abs().tolist()
    assert moved_ours[0] > 5 * moved_fairseq[0]  # a gradient of 1e-10: torch's ε barely damps the step
    assert moved_ours[3] == pytest.approx(moved_fairseq[3], rel=1e-6)  # a gradient of 1: the same step


def test_fairseq_train_takes_torch_adamw_and_resumes_it(tmp_path):
    """fairseq-train --optimizer torch_adamw trains, saves torch's AdamW state in the checkpoint,
    and a second call resumes from it: the option survives the checkpoint, the step count goes on."""
    from fairseq import checkpoint_utils
    from fairseq_cli_helpers import train, write_copy_dataset

    data = write_copy_dataset(tmp_path / "copy", {"train": (64, 3, 5), "valid": (16, 6, 7), "test_iid": (8, 3, 5)})
    argv = [str(data / "bin"), "--arch", "gru_onestep", "--task", "length_generalization", "--criterion", "seq_acc",
            "--optimizer", "torch_adamw", "--adam-betas", "(0.9, 0.98)", "--lr", "1e-3", "--batch-size", "16",
            "--save-dir", str(tmp_path / "ck"), "--no-epoch-checkpoints", "--seed", "1"]  # fmt: skip
    train([*argv, "--max-epoch", "1"])
    first = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "ck" / "checkpoint_last.pt"))
    assert first["cfg"]["optimizer"]["_name"] == "torch_adamw"
    groups = first["last_optimizer_state"]["param_groups"]
    assert groups[0]["betas"] == (0.9, 0.98) and groups[0]["eps"] == 1e-8 and "amsgrad" in groups[0]
    steps = {float(state["step"]) for state in first["last_optimizer_state"]["state"].values()}
    assert steps == {4.0}  # 64 examples in batches of 16
    train([*argv, "--max-epoch", "2"])
    second = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "ck" / "checkpoint_last.pt"))
    assert {float(state["step"]) for state in second["last_optimizer_state"]["state"].values()} == {8.0}
