"""The authors' release (github.com/JRC1995/MonotonicLocationAttention, plain PyTorch, MIT
licence) in fairseq: a release model's state dict mapped onto the matching preset, so that
fairseq-generate and the plugin's scorer run the authors' trained models.

The mapping (``examples/release_equivalence/README.md`` has it as a table, and
``tests/test_release_equivalence.py`` checks it on fixtures the release computed):

* the release's one embedding matrix (encoder input, decoder input, tied output) goes into both
  of the plugin's, rows permuted from the release's vocabulary to the fairseq dictionary's
  (``<sos>`` -> ``<s>``, ``<eos>`` -> ``</s>``, ``<pad>``, ``<unk>``, every other token by name);
* GRUs, START / END, the value input layer, the output layer and the direction gate as they are;
* the value path's two bias-free matrices W_v, W_o as two layers (``--value-path two``) or
  folded into W_o W_v;
* the content query and key projections (no biases: ``--attention-query-bias False``), the
  location layer l_t = W_l h + b_l, and the location heads (the rows step, width, then the
  reference's bias and gate) as rows of the plugin's readout and head matrices;
* Transformer-XL's relative position projection W (Relative, Bi-Relative) as W M, M turning the
  plugin's sinusoid of distance r - 1 (split sin | cos layout, 1-based steps) into the release's
  of distance r (interleaved, 0-based); RoPE (Bi-ROPE) by permuting the query and key rows from
  the release's interleaved pairs to the plugin's split ones, the query rotated back one step;
* the mix logit negated: the release's m weights the location focus, the plugin's the content.

The converted model takes every convention of the release (``--conventions release``), among them
those the presets do not follow: the decoder's first input is ``<s>`` (``--decoder-start bos``), the
Gaussian is divided by its sum plus 1e-20 per padded column (``--location-normalization
sum-per-column``), there is no query bias, the relative scorer's W_r is drawn Xavier-uniform. The release's
"Mix" OneStep / MonoAttn / RMonoAttn configurations never mix (they keep
``location_attention_only``); they convert to the unmixed presets.
"""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from fairseq_monoattn.files import atomic_output
from fairseq_monoattn.recipes import option_words

# release --model -> the plugin preset computing the same function
RELEASE_MODELS: Dict[str, str] = {
    "BiGRU": "gru_content",
    "BiGRUrel": "gru_relative",
    "BiGRUrel_mixdir": "gru_birelative",
    "BiGRUrope_mixdir": "gru_birope",
    "BiGRU_locattn": "gru_locattn",
    "BiGRU_locattn_simple": "gru_locattn_s",
    "BiGRU_mixattn": "gru_mix_locattn",
    "BiGRU_mixattn_simple": "gru_mix_locattn_s",
    "BiGRU_mixattn_simplePR": "gru_mix_locattn_s_pr",
    "BiGRU_OneStep": "gru_onestep",
    "BiGRU_MonoAttn": "gru_monoattn",
    "BiGRU_RMonoAttn": "gru_rmonoattn",
    "BiGRU_AblationStep": "gru_onestep_minus_step2",
    "BiGRU_SoftStairStep": "gru_onestep_minus_step3",
    "BiGRU_FreeStep": "gru_onestep_minus_sigmoid",
    # the release's Mix forms of the OneStep family never mix: the unmixed presets' function
    "BiGRU_MixOneStep": "gru_onestep",
    "BiGRU_MixMonoAttn": "gru_monoattn",
    "BiGRU_MixRMonoAttn": "gru_rmonoattn",
    "BiGRU_MixOneStepPR": "gru_onestep",
    "BiGRU_MixMonoAttnPR": "gru_monoattn",
    "BiGRU_MixRMonoAttnPR": "gru_rmonoattn",
}
# the options that make a preset compute what the release computes: every convention of the release
# (CONVENTIONS["release"] in models/options.py), its one embedding matrix copied into the plugin's two
RELEASE_CONVENTIONS: Dict[str, Any] = {"conventions": "release", "share_all_embeddings": False}
# release special tokens -> fairseq's
SPECIAL_TOKENS = {"<sos>": "<s>", "<eos>": "</s>", "<pad>": "<pad>", "<unk>": "<unk>"}
PREFIX = "encoder_decoder."


class ReleaseConversionError(ValueError):
    """A state dict that cannot be mapped; the message says what does not fit."""


@dataclass
class ConvertedModel:
    arch: str
    options: Dict[str, Any]  # model options (besides the preset's) of the converted model
    state_dict: Dict[str, torch.Tensor]

    def command_line(self) -> List[str]:
        """The fairseq-train options that build this model."""
        return ["--arch", self.arch, *option_words(self.options)]


def _strip(state: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    return {(k[len(PREFIX) :] if k.startswith(PREFIX) else k): v for k, v in state.items()}


def _row_order(vocab: Sequence[str], symbols: Sequence[str], what: str) -> torch.Tensor:
    """Index into the release's rows for each of the fairseq dictionary's symbols."""
    release = {SPECIAL_TOKENS.get(token, token): i for i, token in enumerate(vocab)}
    missing = [s for s in symbols if s not in release]
    extra = [t for t in release if t not in set(symbols)]
    if missing or extra:
        raise ReleaseConversionError(
            f"the {what} dictionary and the release's vocabulary differ: "
            + (f"not in the release: {', '.join(missing[:10])}" if missing else "")
            + ("; " if missing and extra else "")
            + (f"not in the dictionary: {', '.join(extra[:10])}" if extra else "")
        )
    return torch.tensor([release[s] for s in symbols])


def _relative_map(dim: int, dtype: torch.dtype) -> torch.Tensor:
    """M with the release's interleaved sinusoid of distance r = M @ the plugin's split sinusoid
    of distance r - 1 (release steps are 0-based, the plugin's 1-based)."""
    half = dim // 2
    w = torch.exp(torch.arange(half, dtype=torch.float64) * (-math.log(10000.0) / half))
    m = torch.zeros(dim, dim, dtype=torch.float64)
    j = torch.arange(half)
    # sin(r w) = sin((r-1) w) cos w + cos((r-1) w) sin w;  cos(r w) = cos((r-1) w) cos w - sin((r-1) w) sin w
    m[2 * j, j], m[2 * j, half + j] = torch.cos(w), torch.sin(w)
    m[2 * j + 1, half + j], m[2 * j + 1, j] = torch.cos(w), -torch.sin(w)
    return m.to(dtype)


def _rope_permutation(dim: int) -> torch.Tensor:
    """Rows 0, 2, 4, ..., 1, 3, ...: the release's pairs (2j, 2j+1) as the plugin's (j, j + d/2)."""
    return torch.cat([torch.arange(0, dim, 2), torch.arange(1, dim, 2)])


def _rotate_back(dim: int, dtype: torch.dtype) -> torch.Tensor:
    """R(-1): rotates each plugin pair (j, j + d/2) back by one step's angle w_j."""
    half = dim // 2
    w = torch.exp(torch.arange(half, dtype=torch.float64) * (-math.log(10000.0) / half))
    r = torch.zeros(dim, dim, dtype=torch.float64)
    j = torch.arange(half)
    r[j, j], r[half + j, half + j] = torch.cos(w), torch.cos(w)
    r[j, half + j], r[half + j, j] = torch.sin(w), -torch.sin(w)
    return r.to(dtype)


# what a checkout of the release has at its top: the scripts that run it read these
RELEASE_CHECKOUT_FILES = ("train.py", "configs", "models", "preprocess", "LICENSE")


def _lacks(folder: Path) -> List[str]:
    """The files of RELEASE_CHECKOUT_FILES that ``folder`` does not have."""
    return [name for name in RELEASE_CHECKOUT_FILES if not (folder / name).exists()]


def check_release_checkout(folder, option: str = "--release") -> Path:
    """``folder``, resolved, when it is a checkout of the authors' release; else a ValueError that
    names ``option`` and what the folder lacks (one level up or down from the checkout is the
    usual mistake, so the message says where a checkout is when it is a neighbour)."""
    folder = Path(folder).resolve()
    missing = _lacks(folder)
    if not missing:
        return folder
    near = [p for p in [folder.parent, *(folder.glob("*/") if folder.is_dir() else [])] if not _lacks(p)]
    hint = f"; {near[0]} is one, did you mean it?" if near else ""
    what = "does not exist" if not folder.exists() else f"has no {', '.join(missing)}"
    raise ValueError(
        f"{option} {folder} is not a checkout of github.com/JRC1995/MonotonicLocationAttention: it {what}{hint}"
    )


def release_sizes(state: Mapping[str, torch.Tensor]) -> Dict[str, int]:
    """The model sizes a release state dict was built with."""
    state = _strip(state)
    try:
        embed_dim = state["embed_layer.weight"].shape[1]
        encoder_hidden = state["encoder.weight_hh_l0"].shape[1]
        decoder_hidden = state["decodercell.weight_hh"].shape[1]
    except KeyError as error:
        raise ReleaseConversionError(f"not a release GRU encoder-decoder: no {error.args[0]}") from None
    layers = 1 + max(int(k.split("_l")[-1].split("_")[0]) for k in state if k.startswith("encoder.weight_hh_l"))
    if layers != 1:
        raise ReleaseConversionError(f"the release model has {layers} encoder layers; only one layer converts")
    if decoder_hidden != 2 * encoder_hidden:
        raise ReleaseConversionError(
            f"decoder size {decoder_hidden} is not twice the encoder's {encoder_hidden}: no preset has that shape"
        )
    return {"encoder_embed_dim": embed_dim, "decoder_embed_dim": embed_dim, "encoder_hidden_size": encoder_hidden}


def convert(
    release_state: Mapping[str, torch.Tensor],
    release_model: str,
    vocab: Sequence[str],
    source_symbols: Sequence[str],
    target_symbols: Sequence[str],
    value_path: str = "two",
) -> ConvertedModel:
    """The plugin model (preset, options, state dict) computing what the release model does.

    ``vocab``: the release's tokens by index; ``source_symbols`` / ``target_symbols``: the fairseq
    dictionaries' symbols by index (every token of one must be in the other).  ``value_path``:
    "two" keeps W_v and W_o as two layers (trains as the release), "folded" multiplies them."""
    if release_model not in RELEASE_MODELS:
        raise ReleaseConversionError(f"unknown release model {release_model!r}; known: {', '.join(RELEASE_MODELS)}")
    if value_path not in ("two", "folded"):
        raise ReleaseConversionError(f"value_path must be 'two' or 'folded', got {value_path!r}")
    arch = RELEASE_MODELS[release_model]
    s = _strip(release_state)
    sizes = release_sizes(s)
    embed = s["embed_layer.weight"]
    if embed.shape[0] != len(vocab):
        raise ReleaseConversionError(f"the embedding has {embed.shape[0]} rows, the vocabulary {len(vocab)} tokens")
    source_rows = _row_order(vocab, source_symbols, "source")
    target_rows = _row_order(vocab, target_symbols, "target")
    out: Dict[str, torch.Tensor] = {
        "encoder.embed_tokens.weight": embed[source_rows],
        "decoder.embed_tokens.weight": embed[target_rows],
        "decoder.out_bias": s["output_map.bias"][target_rows],
        "encoder.start": s["START"].reshape(-1),
        "encoder.end": s["END"].reshape(-1),
        "decoder.out_proj.weight": s["out_linear1.weight"],
        "decoder.out_proj.bias": s["out_linear1.bias"],
        "decoder.attention.values.0.weight": s["value_transform.weight"],
        "decoder.attention.values.0.bias": s["value_transform.bias"],
    }
    for name, value in s.items():
        if name.startswith("encoder."):
            out["encoder.rnn." + name[len("encoder.") :]] = value
        elif name.startswith("decodercell."):
            out["decoder.cells.0." + name[len("decodercell.") :]] = value
        elif name.startswith("dir_gater."):
            out["decoder.attention.direction_gate.proj." + name[len("dir_gater.") :]] = value
    a = "attention_layer."
    v, o = s[a + "value_linear.weight"], s[a + "head_compose_linear.weight"]
    if value_path == "two":
        out["decoder.attention.values.2.weight"], out["decoder.attention.values.3.weight"] = v, o
    else:
        out["decoder.attention.values.2.weight"] = o @ v
    readout_weight: List[torch.Tensor] = []
    readout_bias: List[torch.Tensor] = []
    location = a + "Wrho" in s
    content = a + "query_linear.weight" in s and (
        not location or a + "mix_scorer.weight" in s and _mixes(release_model)
    )
    dim = 2 * sizes["encoder_hidden_size"]
    if content:
        query, keys = s[a + "query_linear.weight"], s[a + "key_linear.weight"]
        if a + "embed_positions.weight" in s:  # RoPE: the plugin's pairs, and its 1-based steps
            order = _rope_permutation(dim)
            query, keys = _rotate_back(dim, query.dtype) @ query[order], keys[order]
        readout_weight.append(query)
        readout_bias.append(torch.zeros(query.shape[0], dtype=query.dtype))
        out["decoder.attention.keys.weight"] = keys
        if a + "content_bias" in s:  # Transformer-XL relative scores
            out["decoder.attention.scorer.content_bias"] = s[a + "content_bias"][0]
            out["decoder.attention.scorer.position_bias"] = s[a + "forward_position_bias"][0]
            weight = s[a + "forward_position_linear.weight"]
            out["decoder.attention.scorer.position_proj.weight"] = weight @ _relative_map(dim, weight.dtype)
    if location:
        readout_weight.append(s[a + "position_state_linear.weight"])
        readout_bias.append(s[a + "position_state_linear.bias"])
        rho, sigma = s[a + "Wrho"][0], s[a + "Wsigma"][0]  # (d, k), (d, 1)
        heads = [rho[:, 0], sigma[:, 0]]
        if rho.shape[1] == 2:  # LocAttn S: step, bias
            heads.append(rho[:, 1])
        elif rho.shape[1] == 3:  # LocAttn, -Step 2: the release's columns are step, gate, bias
            heads += [rho[:, 2], rho[:, 1]]
        out["decoder.attention.location_heads.weight"] = torch.stack(heads)
        if arch in ("gru_monoattn",):
            out["decoder.attention.location.step.gate_logit"] = s[a + "step_bias"].reshape(-1)[0]
    if content and location:
        readout_weight.append(-s[a + "mix_scorer.weight"])
        readout_bias.append(-s[a + "mix_scorer.bias"])
    out["decoder.attention.readout.weight"] = torch.cat(readout_weight)
    out["decoder.attention.readout.bias"] = torch.cat(readout_bias)
    options = dict(sizes, **RELEASE_CONVENTIONS, value_path=value_path)
    return ConvertedModel(arch, options, out)


def _mixes(release_model: str) -> bool:
    """Whether a release model with both scorers really mixes them (see RELEASE_MODELS)."""
    return RELEASE_MODELS[release_model].startswith("gru_mix_")


def compare_shapes(converted: Mapping[str, torch.Tensor], model_state: Mapping[str, torch.Tensor]) -> Optional[str]:
    """None when the converted state dict has exactly the model's entries and shapes, else what differs."""
    missing = sorted(set(model_state) - set(converted))
    unexpected = sorted(set(converted) - set(model_state))
    if missing or unexpected:
        return f"missing {missing[:5]}, unexpected {unexpected[:5]}"
    for key, value in model_state.items():
        if tuple(converted[key].shape) != tuple(value.shape):
            return f"{key}: {tuple(converted[key].shape)} here, {tuple(value.shape)} in the model"
    return None


__all__ = [
    "RELEASE_MODELS",
    "RELEASE_CONVENTIONS",
    "ConvertedModel",
    "ReleaseConversionError",
    "convert",
    "release_sizes",
    "compare_shapes",
    "Tuple",
]


def write_fairseq_checkpoint(converted: ConvertedModel, data_bin, out, source: Optional[Dict[str, Any]] = None) -> dict:
    """Build ``converted``'s model on the data in ``data_bin`` (its dictionaries) with the paper's
    recipe, load the converted weights (refusing any that do not fit), and write a fairseq
    checkpoint to ``out`` (never over an existing file).  ``source``: what it was converted from,
    kept in the checkpoint.  Returns the checkpoint's model config."""
    from pathlib import Path

    from fairseq import options as fairseq_options
    from fairseq import tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    import fairseq_monoattn
    from fairseq_monoattn.dictionaries import is_dictionary_entry
    from fairseq_monoattn.recipes import PAPER_RECIPE

    fairseq_monoattn.register()
    out = Path(out)
    if out.exists():
        raise ReleaseConversionError(f"{out} exists; nothing was written (choose another name)")
    args = fairseq_options.parse_args_and_arch(
        fairseq_options.get_training_parser(),
        input_args=[str(data_bin), *PAPER_RECIPE, *converted.command_line()],
    )
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    # the model's own entries beside the weights: the data's dictionaries, which the checkpoint keeps
    weights = {k: v for k, v in model.state_dict().items() if not is_dictionary_entry(k)}
    problem = compare_shapes(converted.state_dict, weights)
    if problem:
        raise ReleaseConversionError(f"the converted weights do not fit {converted.arch}: {problem}")
    model.load_state_dict({k: v.to(model.state_dict()[k].dtype) for k, v in converted.state_dict.items()})
    state = {
        "cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
        "model": model.state_dict(),
        "task_state": task.state_dict(),
        "optimizer_history": [
            {
                "criterion_name": "SequenceAccuracyCriterion",
                "optimizer_name": "none (converted from the release)",
                "lr_scheduler_state": {"best": None},
                "num_updates": 0,
            }
        ],  # fmt: skip
        "extra_state": {"train_iterator": {"epoch": 0}, "converted_from_release": source or {}},
        "last_optimizer_state": None,
    }
    with atomic_output(out) as temporary:
        torch.save(state, temporary)
    return state["cfg"]["model"]
