"""The length_generalization task's Adam step is fairseq's, bit for bit."""

import argparse
import copy
from unittest import mock

import pytest
import torch
from fairseq.optim.adam import Adam, FairseqAdam, FairseqAdamConfig
from fairseq.optim.sgd import SGD

from fairseq_monoattn.optim import foreach_adam_step

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
    for a, b in zip(reference_params, tested_params):
        assert torch.equal(a, b)
    state_a = reference.optimizer.state_dict()["state"]
    state_b = tested.optimizer.state_dict()["state"]
    assert state_a.keys() == state_b.keys()
    for key in state_a:
        assert state_a[key]["step"] == state_b[key]["step"]
        assert torch.equal(state_a[key]["exp_avg"], state_b[key]["exp_avg"])
        assert torch.equal(state_a[key]["exp_avg_sq"], state_b[key]["exp_avg_sq"])


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
