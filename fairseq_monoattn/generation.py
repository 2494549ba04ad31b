"""Beam search for ``--task length_generalization`` (what fairseq-generate and fairseq-interactive
decode with through the plugin's task; fairseq's own tasks keep fairseq's SequenceGenerator).

Two things differ from fairseq's SequenceGenerator, each for a wrong number it gave:

* **When a sentence ends.**  fairseq ends a sentence as soon as ``beam`` of its hypotheses have
  ended, even while an unfinished one scores higher than all of them.  A trained copying model
  whose second choice at each step is ``</s>`` with a small probability fills the beam with short
  wrong outputs (score about -0.3) before its right one (about -7e-5) ends: beam 5 on ReCopy test15
  was right 1886 times of 2000 where greedy was right 2000 times.  Here a sentence ends only when
  no unfinished hypothesis can still end more probable than its ``nbest``-th most probable finished
  one: log-probabilities only fall as a hypothesis grows, so once the best unfinished one scores no
  more than that finished one, none can overtake it.  Under ``--lenpen 0`` this is exact (the
  search stops only when its answer can no longer change).  With length normalisation (fairseq's
  default ``--lenpen 1``) the finished hypotheses are ranked by fairseq's normalised score,
  log p / length ** lenpen, and a sentence also goes on until ``beam`` of its hypotheses ended, as
  fairseq's does: a hypothesis ends when ``</s>`` is among the ``beam`` best candidates of its
  sentence's step and the ``beam`` best other candidates go on, as in fairseq, so the search
  follows fairseq's while both run and ends no earlier.  Its finished hypotheses include
  fairseq's, and its answer scores at least fairseq's.  (A rule on the normalised scores alone
  would have to let a hypothesis run to the length limit whenever a longer ending could still
  raise its average, and beam 1 would no longer be greedy decoding.)  Beam 1 is greedy decoding,
  token for token.
* **What an output depends on.**  The models decode in float64 (``precision``, the scorer's
  default; fairseq-monoattn-score, :mod:`~fairseq_monoattn.scoring`), where float32's rounding
  (which depends on the batch an example is decoded in) could flip a near-tied argmax; and the
  length limit ``max_len_a * n + max_len_b`` takes each example's own source length n (tokens, EOS
  included), where fairseq takes the longest source of the batch: an output is the same in any
  batch, the output fairseq gives the example decoded alone.

The hypotheses have fairseq's form (``tokens``, ``score``, ``positional_scores``, ``attention``,
``alignment``), so fairseq-generate prints them as its own.
"""

import contextlib
import math
from typing import Dict, List, Optional

import torch
from fairseq import utils

from .errors import PluginError
from .scoring import PRECISIONS  # the scorer's float types: one definition for both


class GenerationOptionError(PluginError, ValueError):
    """A generation option the plugin's beam search does not take."""


@contextlib.contextmanager
def floats_as(models, dtype: Optional[torch.dtype]):
    """The models' floating-point parameters and buffers in ``dtype`` inside the block, each back
    in its own type afterwards (float32 -> float64 -> float32 is exact; the parameters stay the same
    objects, so an optimizer holding them is unaffected).  ``dtype`` None: as they are."""
    changed = []
    if dtype is not None:
        for model in models:
            for module in model.modules():
                for store in (module._parameters, module._buffers):
                    for name, tensor in store.items():
                        if tensor is not None and tensor.is_floating_point() and tensor.dtype != dtype:
                            changed.append((store, name, tensor.dtype))
                            set_tensor(store, name, tensor.to(dtype))
    try:
        yield
    finally:
        for store, name, original in changed:
            set_tensor(store, name, store[name].to(original))


def set_tensor(store, name, value):
    if isinstance(store[name], torch.nn.Parameter):
        store[name].data = value.data if isinstance(value, torch.nn.Parameter) else value
    else:
        store[name] = value


class Finished:
    """A sentence's ended hypotheses: the ``nbest`` best by normalised score (the output) and the
    ``nbest`` highest log-probabilities (the stopping rule)."""

    def __init__(self, nbest: int, at_least: int = 0):
        self.nbest, self.at_least, self.count = nbest, at_least, 0
        self.hypotheses: List[Dict[str, object]] = []
        self.log_probs: List[float] = []

    def add(self, hypothesis: Dict[str, object], log_prob: float) -> None:
        self.count += 1
        self.hypotheses.append(hypothesis)
        self.hypotheses.sort(key=lambda h: -float(h["score"]))
        del self.hypotheses[self.nbest :]
        self.log_probs = sorted([*self.log_probs, log_prob], reverse=True)[: self.nbest]

    def settled(self, best_unfinished: float) -> bool:
        """No unfinished hypothesis, whose log-probability can only fall, can end above the
        ``nbest``-th most probable finished one, and ``at_least`` hypotheses have ended."""
        return (
            self.count >= self.at_least and len(self.log_probs) >= self.nbest and self.log_probs[-1] >= best_unfinished
        )


class BeamSearch:
    """Beam search that ends a sentence only when its answer is settled (module docstring).
    ``precision``: the models' float type while decoding (None: as they are)."""

    def __init__(
        self,
        models,
        tgt_dict,
        beam_size: int = 1,
        nbest: int = 1,
        max_len_a: float = 0.0,
        max_len_b: int = 200,
        min_len: int = 1,
        len_penalty: float = 1.0,
        unk_penalty: float = 0.0,
        temperature: float = 1.0,
        print_alignment: Optional[str] = None,
        precision: Optional[str] = "float64",
    ):
        from fairseq.sequence_generator import EnsembleModel

        if nbest > beam_size:
            raise GenerationOptionError(f"--nbest {nbest} is more than --beam {beam_size}")
        if temperature <= 0:
            raise GenerationOptionError(f"--temperature must be positive, got {temperature}")
        if precision is not None and precision not in PRECISIONS:
            raise GenerationOptionError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        self.models = list(models)
        self.model = EnsembleModel(self.models)
        self.pad, self.eos, self.unk = tgt_dict.pad(), tgt_dict.eos(), tgt_dict.unk()
        self.vocab_size = len(tgt_dict)
        self.symbols_to_strip_from_output = {self.eos}
        self.beam_size, self.nbest = beam_size, nbest
        self.max_len_a, self.max_len_b, self.min_len = max_len_a, max_len_b, min_len
        self.len_penalty, self.unk_penalty, self.temperature = len_penalty, unk_penalty, temperature
        self.print_alignment = print_alignment
        self.dtype = PRECISIONS[precision] if precision is not None else None

    def cuda(self):
        self.model.cuda()
        return self

    def limits(self, src_tokens: torch.Tensor) -> List[int]:
        """Each example's output limit (tokens before the forced </s>): max_len_a times its own
        source length (EOS included) plus max_len_b, within the decoder's positions."""
        cap = self.model.max_decoder_positions() - 1
        return [min(int(self.max_len_a * n + self.max_len_b), cap) for n in src_tokens.ne(self.pad).sum(1).tolist()]

    @torch.no_grad()
    def generate(self, models, sample, prefix_tokens=None, constraints=None, bos_token=None, **kwargs):
        """The ``nbest`` best hypotheses of every example of ``sample``, in the batch's order."""
        if prefix_tokens is not None or constraints is not None:
            raise GenerationOptionError("the plugin's beam search takes no --prefix-size or --constraints")
        with floats_as(self.models, self.dtype):
            return self.search(sample, self.eos if bos_token is None else bos_token)

    def search(self, sample, bos: int):
        model, beam = self.model, self.beam_size
        net_input = {k: v for k, v in sample["net_input"].items() if k != "prev_output_tokens"}
        src_tokens = net_input["src_tokens"]
        batch, device = src_tokens.size(0), src_tokens.device
        limits = self.limits(src_tokens)
        longest = max(limits)
        encoder_outs = model.forward_encoder(net_input)
        order = torch.arange(batch, device=device).repeat_interleave(beam)
        encoder_outs = model.reorder_encoder_out(encoder_outs, order)
        incremental_states = [{} for _ in self.models]
        rows = batch * beam
        tokens = src_tokens.new_full((rows, longest + 2), self.pad)
        tokens[:, 0] = bos
        scores = torch.full((batch, beam), -math.inf, dtype=torch.float64, device=device)
        scores[:, 0] = 0.0  # every beam starts as the one empty hypothesis
        scores = scores.view(-1)
        token_scores = torch.zeros(rows, longest + 1, dtype=torch.float64, device=device)
        attention = None
        sentences = list(range(batch))  # the batch's examples still searching, in row order
        limit_of_row = torch.tensor(limits, device=device).repeat_interleave(beam)
        # with length normalisation, at least as many ended hypotheses as fairseq's search keeps
        at_least = beam if self.len_penalty != 0 else 0
        finished = [Finished(self.nbest, at_least) for _ in range(batch)]
        for step in range(longest + 1):
            lprobs, attn = model.forward_decoder(
                tokens[:, : step + 1], encoder_outs, incremental_states, self.temperature
            )
            lprobs = lprobs.to(torch.float64)
            lprobs[lprobs != lprobs] = -math.inf
            lprobs[:, self.pad] = -math.inf
            lprobs[:, self.unk] -= self.unk_penalty
            eos_column = lprobs[:, self.eos].clone()
            if step < self.min_len:
                lprobs[:, self.eos] = -math.inf
            at_limit = limit_of_row <= step
            if bool(at_limit.any()):  # the </s> is forced (even before --min-len): every other token is out
                lprobs[at_limit] = -math.inf
                lprobs[at_limit, self.eos] = eos_column[at_limit]
            if attn is not None:
                if attention is None:
                    attention = torch.zeros(rows, attn.size(1), longest + 1, dtype=attn.dtype, device=device)
                attention[:, :, step] = attn
            active, vocab = len(sentences), lprobs.size(1)
            candidates = (scores.unsqueeze(1) + lprobs).view(active, beam, vocab)
            # a hypothesis ends where </s> is among the beam best candidates of its sentence's step
            kth_best = candidates.view(active, -1).topk(beam, dim=1).values[:, -1:]
            ending = candidates[:, :, self.eos]
            ends = ending.isfinite() & (ending >= kth_best)
            for sentence, hypothesis in ends.nonzero().tolist():
                row = sentence * beam + hypothesis
                log_prob = float(ending[sentence, hypothesis])
                self.finish(finished[sentences[sentence]], row, step, log_prob, tokens, token_scores,
                            lprobs[row, self.eos], attention, src_tokens[sentences[sentence]])  # fmt: skip
            going_on = candidates.clone()
            going_on[:, :, self.eos] = -math.inf
            best, chosen = going_on.view(active, -1).topk(beam, dim=1)
            best_unfinished = best[:, 0].tolist()
            settled = [
                finished[s].settled(best_unfinished[i]) or not math.isfinite(best_unfinished[i])
                for i, s in enumerate(sentences)
            ]
            keep = [i for i, done in enumerate(settled) if not done]
            if not keep:
                break
            keep_index = torch.tensor(keep, device=device)
            best, chosen = best[keep_index], chosen[keep_index]
            origin, token = chosen // vocab, chosen % vocab
            new_order = (keep_index.unsqueeze(1) * beam + origin).view(-1)
            chosen_scores = lprobs.view(active, beam * vocab)[keep_index].gather(1, chosen)
            tokens = tokens[new_order]
            tokens[:, step + 1] = token.view(-1)
            token_scores = token_scores[new_order]
            token_scores[:, step] = chosen_scores.view(-1)
            scores = best.view(-1)
            limit_of_row = limit_of_row[new_order]
            if attention is not None:
                attention = attention[new_order]
            sentences = [sentences[i] for i in keep]
            rows = len(sentences) * beam
            model.reorder_incremental_state(incremental_states, new_order)
            encoder_outs = model.reorder_encoder_out(encoder_outs, new_order)
        for example, found in enumerate(finished):
            if not found.hypotheses:
                raise PluginError(f"example {int(sample['id'][example])}: the model gave no finite score to any output")
        return [found.hypotheses for found in finished]

    def finish(self, found: Finished, row, step, log_prob, tokens, token_scores, eos_score, attention, source):
        """Hypothesis ``row`` ends with </s> at ``step``: its output is step + 1 tokens, </s>
        included, scored log p / (step + 1) ** lenpen as fairseq scores it."""
        length = step + 1
        output = torch.cat([tokens[row, 1 : step + 1], tokens.new_tensor([self.eos])])
        positional = torch.cat([token_scores[row, :step], eos_score.view(1).to(token_scores.dtype)])
        hypothesis = {
            "tokens": output,
            "score": torch.tensor(log_prob / length**self.len_penalty, dtype=torch.float64),
            "positional_scores": positional,
            "attention": None,
            "alignment": torch.empty(0),
        }
        if attention is not None:
            weights = attention[row, :, :length].float()  # (source width, output length), as fairseq's
            hypothesis["attention"] = weights
            if self.print_alignment:
                extract = (
                    utils.extract_soft_alignment if self.print_alignment == "soft" else utils.extract_hard_alignment
                )
                hypothesis["alignment"] = extract(weights.t().clone(), source, output, self.pad, self.eos)
        found.add(hypothesis, log_prob)
