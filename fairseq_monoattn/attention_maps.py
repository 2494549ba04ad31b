"""A trained model's cross-attention for one input, ready to plot.

    from fairseq_monoattn.attention_maps import load_checkpoint, attention_map
    loaded = load_checkpoint("checkpoints/checkpoint_best.pt", "data/copy/bin")
    result = attention_map(loaded, "4 7 9 8")          # greedy hypothesis
    result = attention_map(loaded, "4 7 9 8", target="4 7 9 8")   # forced target
    result.matrix            # (output steps, n + 3) numpy array, rows sum to 1
    result.source_labels     # ["START", "4", "7", "9", "8", "</s>", "END"]
    result.output_labels     # ["4", "7", "9", "8", "</s>"]

The output is decoded greedily with fairseq's SequenceGenerator (beam 1); the attention
then comes from ONE teacher-forced forward pass on [</s>] + output, i.e. the decoder's
``extra["attention"]``: row t is the attention used to produce output token t, over the
positions the encoder made of the source: [START, x_1 .. x_n, </s>, END] by default
(fairseq's source EOS is a real position), [START, x_1 .. x_n, END] for a model trained
with ``--source-eos False`` (``model.encoder.keep_source_eos``), whose matrix then has
n + 2 columns and whose source labels have no </s>.

With a direction gate (``gru_onestep``, ``gru_monoattn``, ``gru_birelative``, ...) the
columns are positions of g * e + (1 - g) * reverse(e); ``direction`` holds g (the decoder's
``extra["direction"]`` from the same pass), so a picture can say which way the columns read
(g near 1: left to right, near 0: reversed); ``attended_labels`` gives the column labels in
the order the columns actually read (with ``--direction-gate-keep-end``, reverse(e) keeps the last
column last).

Transformer models (``transformer_small``, ``transformer_onestep``, ...) have no START and END
positions: their columns are the source tokens and </s>, and the matrix is fairseq's alignment
(``extra["attn"]``): the location weights of a location layer, the heads' mean otherwise.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import numpy as np
import torch

from . import scoring
from .metrics import greedy_generator, greedy_hypotheses  # importing this package registered the models
from .modules.direction_gate import DirectionGate

START_LABEL, END_LABEL = "START", "END"


class AttentionMapError(Exception):
    """A problem with the user's input (paths, tokens, model), worded for the command line."""


@dataclass
class LoadedModel:
    model: torch.nn.Module
    task: object
    architecture: str
    checkpoint: Path


@dataclass
class AttentionMap:
    source_labels: List[str]  # START, source tokens, </s> (if the model keeps it), END
    output_labels: List[str]  # output tokens, </s> included
    matrix: np.ndarray  # (len(output_labels), len(source_labels)) attention weights
    hypothesis: str  # output tokens without </s>
    forced: bool  # True when the output was a given target, not the greedy hypothesis
    eos_forced: bool  # greedy output cut at the length limit (the model did not choose </s>)
    direction: Optional[float]  # the direction gate g, for models that have one
    architecture: str
    keeps_end: bool = False  # the gate's reverse(e) keeps the last column last

    @property
    def reads_reversed(self) -> bool:
        """True when the direction gate picked reverse(e): column i then reads position n+1-i."""
        return self.direction is not None and self.direction < 0.5

    @property
    def attended_labels(self) -> List[str]:
        """What each column actually reads: source_labels, reversed when the gate chose reverse(e)."""
        if not self.reads_reversed:
            return list(self.source_labels)
        if self.keeps_end:
            return [*self.source_labels[-2::-1], self.source_labels[-1]]
        return self.source_labels[::-1]


# -- loading ---------------------------------------------------------------------------


def load_checkpoint(checkpoint, data, user_dir=None) -> LoadedModel:
    """A checkpoint through fairseq's own loader, with its task reading dictionaries from ``data``."""
    try:
        models, task, cfg = scoring.load_checkpoint(checkpoint, data, user_dir)
    except scoring.CheckpointError as error:
        raise AttentionMapError(str(error)) from None
    return LoadedModel(models[0], task, architecture_name(cfg), Path(checkpoint))


def architecture_name(cfg) -> str:
    model_cfg = cfg.model
    return getattr(model_cfg, "arch", None) or getattr(model_cfg, "_name", None) or "model"


# -- tokens ----------------------------------------------------------------------------


def encode(dictionary, text: str, side: str) -> torch.Tensor:
    """Space-separated tokens -> ids + [</s>]; unknown or special tokens are an error."""
    tokens = text.split()
    if not tokens:
        raise AttentionMapError(f"the {side} is empty")
    unknown = [tok for tok in tokens if dictionary.index(tok) < dictionary.nspecial]
    if unknown:
        names = ", ".join(repr(tok) for tok in dict.fromkeys(unknown))
        raise AttentionMapError(f"{side} token(s) not in the model's {side} dictionary: {names}")
    ids = [dictionary.index(tok) for tok in tokens] + [dictionary.eos()]
    return torch.tensor(ids, dtype=torch.long)


def labels(dictionary, ids) -> List[str]:
    return [dictionary[i] for i in ids]


# -- decoding and the teacher-forced pass -------------------------------------------------


def net_input(src_ids: torch.Tensor):
    return {"src_tokens": src_ids.unsqueeze(0), "src_lengths": torch.tensor([src_ids.numel()])}


def greedy_output(loaded: LoadedModel, src_ids: torch.Tensor, max_len_a: float, max_len_b: int) -> torch.Tensor:
    """The greedy hypothesis (ending in </s>) from fairseq's SequenceGenerator, beam 1."""
    generator = greedy_generator([loaded.model], loaded.task.target_dictionary, max_len_a, max_len_b)
    sample = {"id": torch.tensor([0]), "net_input": net_input(src_ids)}
    with torch.no_grad():
        (hypothesis,) = greedy_hypotheses(generator, [loaded.model], sample)
    return torch.tensor(hypothesis, dtype=torch.long)


def teacher_forced(model, src_ids: torch.Tensor, output_ids: torch.Tensor):
    """One forward pass on prev = [</s>] + output[:-1] -> (attention (T, positions), logits (T, V),
    direction gate g or None); positions = START, the tokens the encoder keeps, END (GRU models),
    the tokens and </s> (Transformer models)."""
    eos = model.decoder.dictionary.eos()
    prev = torch.cat([torch.tensor([eos]), output_ids[:-1]]).unsqueeze(0)
    inputs = net_input(src_ids)
    with torch.no_grad():
        encoder_out = model.encoder(**inputs)
        logits, extra = model.decoder(prev, encoder_out)
    direction = extra.get("direction")
    gate = None if direction is None else float(direction[0])
    if "attention" not in extra:  # fairseq's Transformer decoder: (B, T, S) alignments
        return extra["attn"][0][0], logits[0], gate
    width = int(encoder_out["lengths"][0])  # the encoder's own count: START and END included
    return extra["attention"][0, :, :width], logits[0], gate


def source_labels(model, dictionary, src_ids: torch.Tensor) -> List[str]:
    """Labels of the encoder's positions: START, the tokens, </s> unless the model drops it, END;
    the tokens and </s> for a Transformer."""
    tokens = labels(dictionary, src_ids)
    if not hasattr(model.encoder, "keep_source_eos"):  # fairseq's Transformer encoder
        return tokens
    if not model.encoder.keep_source_eos:
        tokens = tokens[:-1]  # encode() ends src_ids with </s>
    return [START_LABEL, *tokens, END_LABEL]


def attention_map(
    loaded: LoadedModel, source: str, target: Optional[str] = None, max_len_a: float = 5.0, max_len_b: int = 10
) -> AttentionMap:
    """Attention of ``loaded`` for ``source``, over its greedy output (or the given ``target``).

    The greedy output is at most ``max_len_a * (n + 1) + max_len_b`` tokens before </s>
    (fairseq-generate's --max-len-a / --max-len-b; n + 1 counts the source's </s>)."""
    src_dict, tgt_dict = loaded.task.source_dictionary, loaded.task.target_dictionary
    src_ids = encode(src_dict, source, "source")
    if target is not None:
        output_ids = encode(tgt_dict, target, "target")
    else:
        output_ids = greedy_output(loaded, src_ids, max_len_a, max_len_b)
    attention, logits, gate = teacher_forced(loaded.model, src_ids, output_ids)
    eos_forced = target is None and int(logits[-1].argmax()) != tgt_dict.eos()
    output_labels = labels(tgt_dict, output_ids)
    return AttentionMap(
        source_labels=source_labels(loaded.model, src_dict, src_ids),
        output_labels=output_labels,
        matrix=attention.numpy(),
        hypothesis=" ".join(output_labels[:-1]),
        forced=target is not None,
        eos_forced=eos_forced,
        direction=gate,
        architecture=loaded.architecture,
        keeps_end=gate_keeps_end(loaded.model),
    )


def gate_keeps_end(model) -> bool:
    """True when the model's direction gate reverses all but the last position (--direction-gate-keep-end)."""
    return any(isinstance(module, DirectionGate) and module.keep_end for module in model.modules())


# -- a Transformer decoder's self-attention ---------------------------------------------------


def decoder_self_attention(model, src_ids: torch.Tensor, output_ids: torch.Tensor) -> np.ndarray:
    """Self-attention weights of every decoder layer and head of a Transformer model in the
    teacher-forced pass over prev = [</s>] + output[:-1]: an array (layers, heads, T, T), row i
    the weights step i puts on steps 0 .. i (step 0 reads the start symbol).  The weights are
    softmax(q k^T / sqrt(d) + mask) from the layer's own projections and the decoder's mask
    (causal, and the recency bias and window when the model has them)."""
    if not hasattr(model.decoder, "layers") or not hasattr(model.decoder.layers[0], "self_attn"):
        raise AttentionMapError("decoder self-attention weights need a Transformer model (a transformer_* preset)")
    captured = []

    def keep_inputs(attention, args, kwargs):
        captured.append((attention, kwargs["query"], kwargs.get("attn_mask")))

    handles = [
        layer.self_attn.register_forward_pre_hook(keep_inputs, with_kwargs=True) for layer in model.decoder.layers
    ]
    try:
        teacher_forced(model, src_ids, output_ids)
    finally:
        for handle in handles:
            handle.remove()
    layers = []
    with torch.no_grad():
        for attention, query, mask in captured:
            steps, heads = query.size(0), attention.num_heads  # query (T, 1, C): one sentence
            q = (attention.q_proj(query) * attention.scaling).view(steps, heads, -1).transpose(0, 1)
            k = attention.k_proj(query).view(steps, heads, -1).transpose(0, 1)
            scores = q @ k.transpose(1, 2)  # (heads, T, T)
            if mask is not None:
                scores = scores + mask
            layers.append(torch.softmax(scores.double(), dim=-1).numpy())
    return np.stack(layers)
