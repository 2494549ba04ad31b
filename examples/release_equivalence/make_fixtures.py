"""Run the authors' release (Ray Chowdhury & Caragea, plain PyTorch, MIT) on one small batch and
save what it computes, one file per model, for equivalence tests of the plugin's presets.

    OMP_NUM_THREADS=1 python examples/release_equivalence/make_fixtures.py \\
        --release /path/to/MonotonicLocationAttention --out tests/fixtures/release

The release is not part of this project and is not installed: give the path of a checkout
(commit 234f5b5 was used for the shipped fixtures).  Its model code is imported from there and
run unchanged; only its configuration dict is shrunk (sizes, see SMALL) so that the files stay
small.  Every model runs in float64 (``model.double()``), eval mode (no dropout), teacher forced.

Each ``<name>.pt`` is a dict of plain tensors, lists, strings and numbers (``torch.load(...,
weights_only=True)`` reads it); PROVENANCE.md, written next to the files, describes the fields.
README.md beside this script maps the release's parameters onto the plugin's.
"""

import argparse
import ast
import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch

# (release config name in configs/<dataset>_configs.py, fixture name, the paper's name);
# the fixture name is the plugin preset the model corresponds to, except the two "Mix" models
# the release builds without any mixing (their configs keep location_attention_only = True).
MODELS = [
    ("BiGRU_OneStep", "gru_onestep", "OneStep"),
    ("BiGRU_MonoAttn", "gru_monoattn", "MonoAttn"),
    ("BiGRU_RMonoAttn", "gru_rmonoattn", "RMonoAttn"),
    ("BiGRU", "gru_content", "Content"),
    ("BiGRUrel", "gru_relative", "Relative"),
    ("BiGRUrel_mixdir", "gru_birelative", "Bi-Relative"),
    ("BiGRUrope_mixdir", "gru_birope", "Bi-ROPE"),
    ("BiGRU_locattn", "gru_locattn", "LocAttn"),
    ("BiGRU_locattn_simple", "gru_locattn_s", "LocAttn S"),
    ("BiGRU_mixattn", "gru_mix_locattn", "Mix LocAttn"),
    ("BiGRU_mixattn_simple", "gru_mix_locattn_s", "Mix LocAttn S"),
    ("BiGRU_mixattn_simplePR", "gru_mix_locattn_s_pr", "Mix LocAttn S PR"),
    ("BiGRU_AblationStep", "gru_onestep_minus_step2", "OneStep -Step 2"),
    ("BiGRU_SoftStairStep", "gru_onestep_minus_step3", "OneStep -Step 3"),
    ("BiGRU_FreeStep", "gru_onestep_minus_sigmoid", "OneStep -Sigmoid"),
    ("BiGRU_MixOneStep", "release_mix_onestep", "Mix OneStep (as the release computes it: no mixing)"),
    ("BiGRU_MixMonoAttn", "release_mix_monoattn", "Mix MonoAttn (as the release computes it: no mixing)"),
]

# The paper's sizes are embeddings 64 and 64 per encoder direction (d = 128); these keep the
# fixtures small.  decoder_hidden_size must be 2 x encoder_hidden_size (the release feeds the
# context, of size 2 x encoder_hidden_size, into a GRUCell built for decoder_hidden_size).
# position_max_len only sizes the release's fixed sinusoid tables (relative distances
# -max..max, RoPE positions 0..max-1): every row is the same whatever the size, and 64 covers
# every distance and position this batch uses (42 source positions, 41 decoder steps).
SMALL = dict(
    embd_dim=8,
    encoder_hidden_size=8,
    decoder_hidden_size=16,
    qk_head_dim=16,
    inter_value_size=16,
    v_head_dim=16,
    position_max_len=64,
)

SOURCE_LENGTHS = (5, 10, 15, 40)
# --training: the release's own training steps from its initial weights, for a test that trains
# the converted preset on the same batches and follows it step for step
TRAINING_MODELS = ("gru_monoattn", "gru_onestep", "gru_content")
TRAINING_STEPS = 20
TRAINING_BATCH = 8
# --moments: how the release draws its initial weights, as moments pooled over many draws, for a
# test that draws the converted preset as often and compares (one draw tells spreads, not shapes)
MOMENT_DRAWS = 100
DIGITS = [str(i) for i in range(10)]  # the release's digit vocabulary (vocab in preprocess/process_copy.py)


def import_release(release: Path):
    """Import the release's modules from its checkout.  The release is no package: its modules
    import each other as top-level names (configs, models, collaters), so the checkout has to be
    on sys.path.  This script is the only place in the project that edits sys.path, and only for
    this path, given on the command line."""
    sys.path.insert(0, str(release))
    config_loader = importlib.import_module("configs.configLoader")
    models = importlib.import_module("models")
    collaters = importlib.import_module("collaters")
    return config_loader, models, collaters


def release_vocabulary(release: Path):
    """vocab2idx as the release's digit preprocessing builds it: the digits, then its special
    tags in the order its process_copy.py lists them (read off that file, not assumed)."""
    tree = ast.parse((release / "preprocess" / "process_copy.py").read_text())
    special = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "special_tags" for t in node.targets):
            special = ast.literal_eval(node.value)
    if special is None:
        raise SystemExit("no special_tags in preprocess/process_copy.py: is --release a checkout of the release?")
    vocab2idx = {token: i for i, token in enumerate(DIGITS)}
    for token in special:
        vocab2idx.setdefault(token, len(vocab2idx))
    return vocab2idx


def release_config(config_loader, model_name: str, dataset: str, vocab2idx: dict) -> dict:
    """The config dict train.py hands the model: load_config, the vocabulary entries
    utils/data_utils.py load_data adds, generate=False (training-time teacher forcing), and
    the SMALL sizes."""
    config = config_loader.load_config(argparse.Namespace(dataset=dataset, model=model_name, model_type="seq2seq"))
    config.update(SMALL)
    config.update(
        vocab2idx=dict(vocab2idx),
        idx2vocab={i: t for t, i in vocab2idx.items()},
        vocab_len=len(vocab2idx),
        PAD_id=vocab2idx["<pad>"],
        UNK_id=vocab2idx.get("<unk>"),
        SEP_id=vocab2idx.get("<sep>"),
        EOS_id=vocab2idx["<eos>"],
        SOS_id=vocab2idx["<sos>"],
        generate=False,
    )
    return config


def copy_example(length: int, generator, vocab2idx) -> dict:
    """One Copy example of ``length`` random digits as the release's collater takes it: target =
    the source digits, then <eos>; the source has no <eos>, as the release's process_copy.py
    writes them."""
    src = [DIGITS[d] for d in torch.randint(0, 10, (length,), generator=generator).tolist()]
    trg = src + ["<eos>"]
    src_vec = [vocab2idx[t] for t in src]
    trg_vec = [vocab2idx[t] for t in trg]
    return dict(src=src, trg=trg, src_vec=src_vec, ptr_src_vec=list(src_vec), oov_num=0, trg_vec=trg_vec,
                label=list(trg_vec))  # fmt: skip


def make_batch(collaters, config, vocab2idx, seed: int):
    """Copy examples of SOURCE_LENGTHS digits collated by the release's own collater."""
    generator = torch.Generator().manual_seed(seed)
    items = [copy_example(n, generator, vocab2idx) for n in SOURCE_LENGTHS]
    collater = collaters.seq2seq_collater(PAD=vocab2idx["<pad>"], config=config, train=False)
    batches = collater.collate_fn(items)
    assert len(batches) == 1
    batch = batches[0]
    # the collater sorts by source + target length: SOURCE_LENGTHS is already in that order
    assert [len(s) for s in batch["src"]] == list(SOURCE_LENGTHS)
    # float32 masks would put the release's positions and step sizes in float32
    batch["src_mask"] = batch["src_mask"].double()
    batch["trg_mask"] = batch["trg_mask"].double()
    return batch


def run_release(models, config, batch, seed: int):
    """Build the release model (seeded), convert it to float64, run it teacher forced in eval
    mode and record its outputs, every step's attention, the centre mu of its location
    attention, its content/location mix weight and its direction gate."""
    torch.manual_seed(seed)
    model = models.seq2seq_framework(data=None, config=config)
    model = model.double().eval()
    ed = model.encoder_decoder
    assert ed.output_map.w[0] is ed.embed_layer.weight and ed.output_map.w[0].dtype == torch.float64
    state = {str(k): v.detach().clone() for k, v in model.state_dict().items()}

    record = {"attention": [], "centre": [], "mix": [], "gate": []}
    attention = ed.attention_layer
    hooks = [
        attention.register_forward_hook(
            lambda module, args, out: record["attention"].append(out["full_attention_dist"].detach())
        )
    ]
    if hasattr(attention, "score_positions"):
        original = attention.score_positions

        def score_positions(*args, **kwargs):
            scores, state_, mu = original(*args, **kwargs)
            record["centre"].append(mu.detach())
            return scores, state_, mu

        attention.score_positions = score_positions
    if getattr(attention, "mix_attention", False):
        hooks.append(
            attention.mix_scorer.register_forward_hook(
                lambda module, args, out: record["mix"].append(torch.sigmoid(out).detach())
            )
        )
    if hasattr(ed, "dir_gater"):
        hooks.append(
            ed.dir_gater.register_forward_hook(
                lambda module, args, out: record["gate"].append(torch.sigmoid(5 * out).detach())
            )
        )

    with torch.no_grad():
        out = model(batch)
    for hook in hooks:
        hook.remove()

    probabilities = out["logits"]  # the release's "logits" are softmax probabilities
    assert probabilities.dtype == torch.float64
    steps = probabilities.size(1)
    weights = torch.stack(record["attention"], dim=1)  # (N, T, heads, 1, S)
    assert weights.size(1) == steps and weights.size(2) == 1, "one head expected"
    result = {
        "state_dict": state,
        "log_probs": torch.log(probabilities),
        "attention": weights[:, :, 0, 0, :].contiguous(),
    }
    if record["centre"]:
        result["location_centre"] = torch.stack(record["centre"], dim=1)[:, :, 0, 0, 0].contiguous()
    mixes = getattr(attention, "mix_attention", False) and not getattr(attention, "location_attention_only", False)
    if mixes:
        result["mix_weight"] = torch.stack(record["mix"], dim=1)[:, :, 0, 0].contiguous()
    if record["gate"]:
        assert len(record["gate"]) == 1
        result["direction_gate"] = record["gate"][0].view(-1)
    result["mixes_content"] = bool(mixes)
    return result


def make_training_batches(collaters, config, vocab2idx, seed: int):
    """TRAINING_STEPS batches of TRAINING_BATCH Copy examples, sources of 3-12 digits (so each
    batch is padded), collated by the release's collater (sorted by length, right-padded), its
    masks cast to float64."""
    generator = torch.Generator().manual_seed(seed)
    collater = collaters.seq2seq_collater(PAD=vocab2idx["<pad>"], config=config, train=False)
    batches = []
    for _ in range(TRAINING_STEPS):
        lengths = torch.randint(3, 13, (TRAINING_BATCH,), generator=generator).tolist()
        items = [copy_example(n, generator, vocab2idx) for n in lengths]
        (batch,) = collater.collate_fn(items)
        batch["src_mask"] = batch["src_mask"].double()
        batch["trg_mask"] = batch["trg_mask"].double()
        batches.append(batch)
    return batches


def train_release(models, agents, config, batches, seed: int):
    """Build the release model (seeded, float64, dropout 0) and train it on ``batches`` with the
    release's own training step: its agent's ``run`` (forward, the loss -log(p + 1e-9) averaged
    over the target tokens), ``backward`` and ``step`` (gradient norm clipped at
    max_grad_norm, then its optimizer, torch's AdamW).  Returns the initial and final state
    dicts and the loss of every step."""
    torch.manual_seed(seed)
    model = models.seq2seq_framework(data=None, config=config).double()
    initial = {str(k): v.detach().clone() for k, v in model.state_dict().items()}
    agent = agents.seq2seq_agent(model, config, torch.device("cpu"))
    losses = []
    for batch in batches:
        output = agent.run(dict(batch), train=True)
        agent.backward(output["loss"])
        agent.step()
        losses.append(output["loss"].item())
    final = {str(k): v.detach().clone() for k, v in model.state_dict().items()}
    return {"state_dict": initial, "final_state_dict": final, "losses": torch.tensor(losses, dtype=torch.float64)}


def draw_moments(values: torch.Tensor) -> dict:
    """Moments of the numbers drawn (pooled over draws): count, mean, standard deviation, the
    fourth standardised moment (kurtosis: 1.8 for a uniform, 3 for a normal) and the share of
    exact zeros."""
    x = values.double().flatten()
    mean, std = x.mean(), x.std()
    kurtosis = (((x - mean) / std) ** 4).mean().item() if std > 0 else None
    return dict(count=x.numel(), mean=mean.item(), std=std.item(), kurtosis=kurtosis,
                zeros=(x == 0).double().mean().item())  # fmt: skip


def make_moment_fixture(release: Path, out: Path, dataset: str):
    """out/initial_moments.json: for each model of MODELS, the moments of every tensor of its
    initial state dict over MOMENT_DRAWS draws (torch.manual_seed(0 .. MOMENT_DRAWS - 1) before
    each, at the SMALL sizes).  The embedding's <pad> row is left out: the release draws it (its
    kaiming init overwrites the zero row) but never reads it; fairseq keeps it at zero."""
    config_loader, models, _ = import_release(release)
    vocab2idx = release_vocabulary(release)
    result = dict(
        release_commit=release_commit(release),
        torch_version=torch.__version__,
        draws=MOMENT_DRAWS,
        seeds=f"torch.manual_seed(s) before each model is built, s = 0 .. {MOMENT_DRAWS - 1}",
        sizes=SMALL,
        left_out="the <pad> row of encoder_decoder.embed_layer.weight",
        command="OMP_NUM_THREADS=1 python examples/release_equivalence/make_fixtures.py "
        "--release /path/to/MonotonicLocationAttention --out tests/fixtures/release --moments",
        models={},
    )
    for model_name, name, _ in MODELS:
        config = release_config(config_loader, model_name, dataset, vocab2idx)
        draws = {}
        for seed in range(MOMENT_DRAWS):
            torch.manual_seed(seed)
            state = models.seq2seq_framework(data=None, config=config).state_dict()
            for key, value in state.items():
                if value.is_floating_point():
                    if key.endswith("embed_layer.weight"):
                        value = torch.cat([value[: vocab2idx["<pad>"]], value[vocab2idx["<pad>"] + 1 :]])
                    draws.setdefault(key, []).append(value.detach().flatten())
        result["models"][name] = {key: draw_moments(torch.cat(values)) for key, values in draws.items()}
        print(f"{name}: {len(draws)} tensors, {MOMENT_DRAWS} draws")
    path = out / "initial_moments.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{path}: {path.stat().st_size} bytes")


def fixture_header(model_name, name, paper_name, commit, seed, batch_seed, config, vocab) -> dict:
    """What every fixture file records of where it comes from (PROVENANCE.md's first table)."""
    return {
        "release_model": model_name,
        "name": name,
        "paper_name": paper_name,
        "release_commit": commit,
        "torch_version": str(torch.__version__),
        "seed": seed,
        "batch_seed": batch_seed,
        "config": plain(config),
        "vocab": vocab,
    }


def make_training_fixtures(release: Path, out: Path, dataset: str, seed: int, batch_seed: int):
    """out/training/<name>.pt for each of TRAINING_MODELS, and its PROVENANCE.md."""
    config_loader, models, collaters = import_release(release)
    agents = importlib.import_module("agents")  # the release's training step; it imports nltk
    vocab2idx = release_vocabulary(release)
    vocab = [t for t, _ in sorted(vocab2idx.items(), key=lambda kv: kv[1])]
    commit = release_commit(release)
    folder = out / "training"
    folder.mkdir(parents=True, exist_ok=True)
    names = dict((name, (model_name, paper_name)) for model_name, name, paper_name in MODELS)
    for name in TRAINING_MODELS:
        model_name, paper_name = names[name]
        config = release_config(config_loader, model_name, dataset, vocab2idx)
        config["dropout"] = 0.0  # the two programs draw their dropout masks differently
        batches = make_training_batches(collaters, config, vocab2idx, batch_seed)
        result = train_release(models, agents, config, batches, seed)
        fixture = {
            **fixture_header(model_name, name, paper_name, commit, seed, batch_seed, config, vocab),
            "src_tokens": [[list(s) for s in batch["src"]] for batch in batches],
            "trg_tokens": [[list(t) for t in batch["trg"]] for batch in batches],
            **result,
        }
        path = folder / f"{name}.pt"
        torch.save(fixture, path)
        print(f"{path}: {model_name}, {path.stat().st_size} bytes")
    shutil.copyfile(release / "LICENSE", folder / "LICENSE.release-MIT")
    (folder / "PROVENANCE.md").write_text(
        TRAINING_PROVENANCE.format(
            commit=commit,
            torch_version=torch.__version__,
            dataset=dataset,
            models=", ".join(f"`{name}.pt` ({names[name][0]}, {names[name][1]})" for name in TRAINING_MODELS),
            small=", ".join(f"`{k}` = {v}" for k, v in SMALL.items()),
            steps=TRAINING_STEPS,
            batch=TRAINING_BATCH,
            seed=seed,
            batch_seed=batch_seed,
            out=out,
        )
    )


def plain(value):
    """The config as plain Python values (torch.load(weights_only=True) reads them)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def release_commit(release: Path) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(release), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


PROVENANCE = """# Fixtures from the authors' release

Each `<name>.pt` here records what the authors' release of "Monotonic Location Attention for
Length Generalization" (Ray Chowdhury & Caragea, ICML 2023) computes for one model at
initialisation on one small batch, for tests that map its weights onto the plugin's presets
and compare. They were made by running the release's own code, unchanged apart from the sizes
in its config dict.

- Release: github.com/JRC1995/MonotonicLocationAttention, commit {commit}
- Licence: MIT, Copyright (c) 2023 Jishnu Ray Chowdhury: its text is `LICENSE.release-MIT`
  beside this file (these files derive from running that code).
- Made with torch {torch_version} (CPU), float64, one thread, by

      {command}

  (`examples/release_equivalence/make_fixtures.py`; its README maps every release parameter
  onto the plugin's.)

## The models

| file | release config (`configs/{dataset}_configs.py`) | paper name |
| --- | --- | --- |
{model_rows}

`release_mix_onestep.pt` / `release_mix_monoattn.pt`: the release's Mix OneStep / Mix MonoAttn
configs inherit `location_attention_only = True`, which its attention checks before
`mix_attention`, so they compute OneStep / MonoAttn (their `mix_scorer` weights exist but are
never used; `mixes_content` is False). No plugin preset computes this with a mix weight; the
function is that of `gru_onestep` / `gru_monoattn`.

## How they were made

- Config: the release's `load_config` for dataset `{dataset}` (`configs/{dataset}_configs.py`;
  every config file of the release but CFQ's has the same content, `fgc_configs.py` included),
  then these sizes: {small}; heads = {heads} (the release's value). Everything else is the
  release's value (see `config` in each file).
- Seed: `torch.manual_seed({seed})` right before each model is built (in float32, as the release
  builds it), then `model.double().eval()`.
- Batch: four Copy examples with sources of {lengths} digits drawn with
  `torch.Generator().manual_seed({batch_seed})`; target = the source digits then `<eos>`; the
  source has no `<eos>` (as the release's `process_copy.py`). Collated by the release's
  `seq2seq_collater` (right-padded with `<pad>`); its masks were cast to float64.
- Forward: the release model's `forward(batch)` with `config["generate"] = False` (teacher
  forcing), under `torch.no_grad()`.

## Fields of each file

| key | what |
| --- | --- |
| `release_model` | the release's config class name without `_config` (its `--model`) |
| `name`, `paper_name` | the file's name (the plugin preset it corresponds to) and the paper's name |
| `release_commit`, `torch_version`, `seed`, `batch_seed` | provenance |
| `config` | the release's config dict as used (plain values) |
| `vocab` | list: index -> token of the release's vocabulary (digits 0-9, then `<sos>`, `<unk>`, `<eos>`, `<pad>`) |
| `state_dict` | the model's full initial `state_dict()`, float64, the release's own names (`encoder_decoder.*`) |
| `src`, `trg` | (N, S) / (N, T) long: sources / targets in the release's index space, right-padded with `<pad>` |
| `src_mask`, `trg_mask` | (N, S) / (N, T) float64: 1 on real tokens |
| `src_tokens`, `trg_tokens` | lists of token strings, unpadded (targets end in `<eos>`) |
| `log_probs` | (N, T, V) float64: log of the release's output distribution at every target step (V in the release's index order; padded steps included, mask them with `trg_mask`). The first decoder input is `<sos>`, then the target shifted right. The release's loss is `-log(p + 1e-9)`; this is `log(p)` |
| `attention` | (N, T, S + 2) float64: every decoder step's cross-attention weights over the encoder positions [START, x_1 .. x_n, END, padding] (heads = 1) |
| `location_centre` | (N, T) float64, location-attention models only: the centre mu of the Gaussian at each step (after the clamp where there is one) |
| `mix_weight` | (N, T) float64, models that mix only: the release's m = sigmoid(mix_scorer(h_{{t-1}})), the weight of the *location* attention (the content attention gets 1 - m) |
| `direction_gate` | (N,) float64, models with a direction gate only: g = sigmoid(5 dir_gater(e_cls)), 1 = forward encodings |
| `mixes_content` | bool: whether the attention really mixes content attention in |

## Worth knowing

- The state dicts hold parameters the release never uses: `h0` (every model: the decoder
  starts from e_cls), `attention_layer.step_bias` (all OneStep-family models; only MonoAttn's
  step reads it) and `attention_layer.mix_scorer.*` in the two `release_mix_*` files.
- The fixed sinusoid tables of Relative / Bi-Relative (`relative_position_embed.weight`) and
  Bi-ROPE (`embed_positions.weight`) are built by the release in float32: their float64 copies
  hold float32-rounded values, which moves the log-probs by up to ~5e-10 (Relative) / ~2e-11
  (Bi-ROPE) against exact sinusoids. They cover the distances -64..64 / positions 0..63 here
  (`position_max_len` = 64, the release's 5000 only makes them longer, same rows).
- At this initialisation no Gaussian underflows, so the release's normalisation
  `g / sum(g + 1e-20)` equals a softmax to float64 precision on this batch: the fixtures do not
  tell the two apart.
- Nothing of the release's code is in this folder: only its licence text and these outputs.

## initial_moments.json

How the release draws its initial weights, for a test that draws the converted presets as often
and compares: for each model above, the moments (count, mean, standard deviation, kurtosis, share
of zeros) of every tensor of its initial state dict, pooled over 100 draws at the sizes above
(`torch.manual_seed(s)` before each, s = 0 .. 99), the embedding's `<pad>` row left out. Made by
the same script with `--moments`; the file names its release commit and torch version.
"""


TRAINING_PROVENANCE = """# Training fixtures from the authors' release

Each `<name>.pt` here records the authors' release training one small model for {steps} steps,
with its own code, so that a test can train the converted preset on the same batches and compare
step by step. Models: {models}.

- Release: github.com/JRC1995/MonotonicLocationAttention, commit {commit}; MIT licence,
  Copyright (c) 2023 Jishnu Ray Chowdhury (`LICENSE.release-MIT` beside this file).
- Made with torch {torch_version} (CPU), float64, one thread, by

      OMP_NUM_THREADS=1 python examples/release_equivalence/make_fixtures.py \\
          --release /path/to/MonotonicLocationAttention --out {out} --training

## How they were made

- Config: the release's `load_config` for dataset `{dataset}`, these sizes: {small}; dropout 0
  (the release and the plugin draw their dropout masks from different generators, so only
  without dropout can two runs follow one trajectory). Everything else is the release's value.
- Model: `torch.manual_seed({seed})`, built as the release builds it, then `model.double()`.
- Batches: {steps} batches of {batch} Copy examples, sources of 3-12 digits drawn with
  `torch.Generator().manual_seed({batch_seed})`, targets the source digits then `<eos>`,
  collated by the release's `seq2seq_collater` (sorted by length, right-padded); masks float64.
- Training: the release's `seq2seq_agent` built on the model with the config (its optimizer:
  torch's AdamW, lr 1e-3, weight decay 0); each step its `run(batch, train=True)` (teacher
  forced; loss = mean over target tokens of -log(p + 1e-9)), `backward(loss)` and `step()`
  (gradient norm clipped at 5, the optimizer step, gradients zeroed).

## Fields of each file

| key | what |
| --- | --- |
| `release_model`, `name`, `paper_name`, `release_commit`, `torch_version`, `seed`, `batch_seed`, `config`, `vocab` | as in the fixtures one folder up |
| `state_dict` | the initial state dict, float64, the release's names |
| `final_state_dict` | the state dict after the last step |
| `losses` | ({steps},) float64: the loss of each step, before its update |
| `src_tokens`, `trg_tokens` | per step, the batch's sources and targets as token strings in the collated order (targets end in `<eos>`) |
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--release", required=True, type=Path, help="a checkout of the authors' release")
    parser.add_argument("--out", required=True, type=Path, help="folder for the fixtures")
    parser.add_argument("--dataset", default="copy", help="the release's config file configs/<dataset>_configs.py")
    parser.add_argument("--seed", type=int, default=0, help="torch seed before each model is built")
    parser.add_argument("--batch-seed", type=int, default=1234, help="seed of the batch's digits")
    parser.add_argument("--only", nargs="*", help="fixture names to make (default: all)")
    parser.add_argument(
        "--training", action="store_true", help="make only the training fixtures, in OUT/training/ (TRAINING_MODELS)"
    )
    parser.add_argument(
        "--moments", action="store_true", help="make only OUT/initial_moments.json (MOMENT_DRAWS draws of each model)"
    )
    args = parser.parse_args()
    release = args.release.resolve()
    if not (release / "train.py").is_file() or not (release / "models").is_dir():  # no plugin here to check it
        parser.error(f"--release {release} is not a checkout of the authors' release: it has no train.py and models/")
    if args.training:
        make_training_fixtures(release, args.out, args.dataset, args.seed, args.batch_seed)
        return
    if args.moments:
        make_moment_fixture(release, args.out, args.dataset)
        return
    config_loader, models, collaters = import_release(release)
    vocab2idx = release_vocabulary(release)
    vocab = [t for t, _ in sorted(vocab2idx.items(), key=lambda kv: kv[1])]
    commit = release_commit(release)
    args.out.mkdir(parents=True, exist_ok=True)

    heads = set()
    for model_name, name, paper_name in MODELS:
        if args.only and name not in args.only:
            continue
        config = release_config(config_loader, model_name, args.dataset, vocab2idx)
        heads.add(config["heads"])
        batch = make_batch(collaters, config, vocab2idx, args.batch_seed)
        result = run_release(models, config, batch, args.seed)
        fixture = {
            **fixture_header(model_name, name, paper_name, commit, args.seed, args.batch_seed, config, vocab),
            "src": batch["src_vec"],
            "trg": batch["trg_vec"],
            "src_mask": batch["src_mask"],
            "trg_mask": batch["trg_mask"],
            "src_tokens": [list(s) for s in batch["src"]],
            "trg_tokens": [list(t) for t in batch["trg"]],
            **result,
        }
        path = args.out / f"{name}.pt"
        torch.save(fixture, path)
        print(f"{path}: {model_name}, {path.stat().st_size} bytes")

    shutil.copyfile(release / "LICENSE", args.out / "LICENSE.release-MIT")
    command = (
        "OMP_NUM_THREADS=1 python examples/release_equivalence/make_fixtures.py "
        "--release /path/to/MonotonicLocationAttention --out " + str(args.out)
    )
    for flag, value, default in (
        ("--dataset", args.dataset, "copy"),
        ("--seed", args.seed, 0),
        ("--batch-seed", args.batch_seed, 1234),
    ):
        if value != default:
            command += f" {flag} {value}"
    rows = "\n".join(
        f"| `{name}.pt` | `{model_name}_config` | {paper_name} |" for model_name, name, paper_name in MODELS
    )
    (args.out / "PROVENANCE.md").write_text(
        PROVENANCE.format(
            commit=commit,
            torch_version=torch.__version__,
            command=command,
            dataset=args.dataset,
            model_rows=rows,
            small=", ".join(f"`{k}` = {v}" for k, v in SMALL.items()),
            heads=", ".join(str(h) for h in sorted(heads)) or "1",
            seed=args.seed,
            batch_seed=args.batch_seed,
            lengths=", ".join(str(n) for n in SOURCE_LENGTHS),
        )
    )


if __name__ == "__main__":
    main()
