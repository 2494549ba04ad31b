"""Which code a model runs is chosen once, in fast_path.choose, when it is built and again when it is
moved or cast; the training log names the code that ran."""

import copy
import io
import logging

import torch
import torch.nn.functional as F

from fairseq_monoattn import fast_path
from fairseq_monoattn.modules import compiled
from fairseq_monoattn.testing import batch, build, digit_dictionary

D = digit_dictionary()


def training_step(model, sample):
    """One teacher-forced pass and its backward pass; the loss."""
    logits, _ = model(**sample["net_input"])
    log_probs = F.log_softmax(logits.float(), dim=-1)
    loss = F.nll_loss(log_probs.flatten(0, 1), sample["target"].flatten(), ignore_index=D.pad())
    loss.backward()
    return loss


def test_the_code_is_chosen_when_the_model_is_built_and_again_when_it_is_moved_or_cast(monkeypatch, caplog):
    """fast_path.choose decides once, at build_model: the fast path for CPU parameters of float32 or
    float64 where the kernels are built and on, else the reference; a cast (fairseq's --fp16 calls
    .half()) chooses again and says so in the log; a copy keeps one fast path for its modules; and
    the training log's code line names the code that ran."""
    built = compiled.available()
    model = build("gru_onestep", D, seed=1)
    assert isinstance(model.fast_path, fast_path.FastPath) == built
    assert model.encoder.fast_path is model.decoder.fast_path is model.fast_path
    copied = copy.deepcopy(model)  # fairseq's EMA copies the model; torch.save pickles it
    assert copied.encoder.fast_path is copied.decoder.fast_path is copied.fast_path
    assert isinstance(copied.fast_path, fast_path.FastPath) == built
    torch.save(model, io.BytesIO())
    with caplog.at_level(logging.INFO):
        model.half()
    assert model.fast_path is None and model.decoder.fast_path is None and model.encoder.fast_path is None
    assert ("it now runs the reference" in caplog.text) == built
    model.double()
    assert isinstance(model.decoder.fast_path, fast_path.FastPath) == built
    monkeypatch.setattr(compiled, "ENABLED", False)  # FAIRSEQ_MONOATTN_COMPILED=0 before the build
    assert build("gru_onestep", D, seed=1).fast_path is None
    monkeypatch.setattr(compiled, "ENABLED", True)
    sample = batch(D, [list("3141"), list("27")], [list("3141"), list("27")])
    for cast, code in ((torch.float64, fast_path.LOOP if built else "Python"), (torch.bfloat16, "Python")):
        model = build("gru_onestep", D, seed=1).to(cast).train()
        caplog.clear()
        with caplog.at_level(logging.INFO):
            training_step(model, sample)
        assert compiled.TRAINING_CODE_LINE + code in caplog.text


def test_under_autocast_the_reference_runs_the_pass():
    """Autocast's precisions are not the kernels': a model on the fast path trains under it through
    the reference (the training log's code line: Python), with float32 gradients."""
    model = build("gru_onestep", D, seed=1).train()
    sample = batch(D, [list("3141"), list("27")], [list("3141"), list("27")])
    assert fast_path.FastPath.serves()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not fast_path.FastPath.serves()
        loss = training_step(model, sample)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert torch.isfinite(loss) and grads and all(g.dtype == torch.float32 for g in grads)
