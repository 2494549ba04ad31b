"""The input gates of embedded tokens through a table of every vocabulary row (token_tables.py):
the same outputs and gradients as the product at every position, in the modules and in the models."""

import pytest
import torch
import torch.nn.functional as F
from model_helpers import ALL_ARCHS

from fairseq_monoattn.modules import token_tables
from fairseq_monoattn.modules.gru import bidirectional_gru
from fairseq_monoattn.modules.token_tables import TokenRows, table_applies, token_map
from fairseq_monoattn.testing import batch, build, digit_dictionary


def _embedding(rows=9, dim=5, padding_idx=1):
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(rows, dim, padding_idx=padding_idx).double()
    with torch.no_grad():
        embedding.weight[padding_idx] = torch.randn(dim, dtype=torch.float64)  # a padding row not zero
    return embedding


def test_the_table_is_chosen_only_where_it_is_smaller_and_the_lookup_plain():
    embedding = torch.nn.Embedding(14, 8, padding_idx=1)
    assert table_applies(embedding, 15) and not table_applies(embedding, 14)
    assert not table_applies(embedding, 16, extra_rows=2) and table_applies(embedding, 17, extra_rows=2)
    assert not table_applies(torch.nn.Embedding(14, 8, max_norm=1.0), 1000)  # renormalises what it reads
    assert not table_applies(torch.nn.Embedding(14, 8, sparse=True), 1000)
    assert not table_applies(torch.nn.Embedding(14, 8, scale_grad_by_freq=True), 1000)


def test_the_token_map_is_the_map_of_the_looked_up_rows_and_the_padding_row_takes_no_gradient():
    embedding = _embedding()
    weight = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(7, dtype=torch.float64, requires_grad=True)
    tokens = torch.tensor([[2, 1, 1, 5], [8, 8, 0, 1], [3, 4, 6, 7]])  # padding (1) included
    assert table_applies(embedding, tokens.numel())
    direction = torch.randn(3, 4, 7, dtype=torch.float64)
    params = [embedding.weight, weight, bias]
    got = token_map(embedding, tokens, weight, bias)
    want = F.linear(embedding(tokens), weight, bias)
    assert torch.allclose(got, want, rtol=0, atol=1e-14)
    got_grads = torch.autograd.grad((got * direction).sum(), params)
    want_grads = torch.autograd.grad((want * direction).sum(), params)
    for g, w in zip(got_grads, want_grads):
        assert torch.allclose(g, w, rtol=0, atol=1e-13)
    assert got_grads[0][1].abs().sum() == 0  # the padding row, as nn.Embedding's lookup
    assert got_grads[0][2].abs().sum() > 0


@pytest.mark.parametrize("compiled", [False, True])
def test_the_encoder_gru_reads_the_table_rows_as_it_reads_the_rows_made(compiled):
    from fairseq_monoattn.fast_path import FastPath
    from fairseq_monoattn.modules import compiled as kernels

    if compiled and not kernels.available():
        pytest.skip("the C++ GRU loop is not built")
    fast_path = FastPath() if compiled else None
    torch.manual_seed(2)
    rnn = torch.nn.GRU(5, 4, num_layers=2, batch_first=True, bidirectional=True).double()
    table = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([5, 2, 4, 1, 6])
    ids = torch.randint(0, 6, (5, 6))
    params = [table] + list(rnn.parameters())
    runs = []
    for x in (TokenRows(ids, table), table[ids]):
        out, final = bidirectional_gru(rnn, x, lengths, fast_path=fast_path)
        loss = (out * torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view(out.shape)).sum()
        runs.append((out, final, torch.autograd.grad(loss + final.pow(2).sum(), params)))
    (got, got_final, got_grads), (want, want_final, want_grads) = runs
    assert torch.allclose(got, want, rtol=0, atol=1e-14) and torch.allclose(got_final, want_final, rtol=0, atol=1e-14)
    for g, w in zip(got_grads, want_grads):
        assert torch.allclose(g, w, rtol=0, atol=1e-13)


@pytest.mark.parametrize("arch", ["gru_seq2seq", "gru_mix_monoattn", "gru_relative"])
def test_a_model_computes_the_same_with_and_without_the_tables(arch, monkeypatch):
    """Training pass of a preset, float64: with the tables (a digit vocabulary of 14 rows against
    batches of more positions) and with the tables switched off, the same log-probabilities and
    the same gradient of every parameter; the tables were taken when on."""
    assert arch in ALL_ARCHS
    dictionary = digit_dictionary()
    sources = [list("314"), list("2718281"), list("141421356237"), list("57721566490153286060")]
    sample = batch(dictionary, sources, [s[::-1] for s in sources])
    runs = []
    for tables in (True, False):
        model = build(arch, dictionary, seed=3).double().train()
        taken = []

        def choose(embedding, positions, extra_rows=0, tables=tables, taken=taken):
            taken.append(positions)
            return tables and embedding.num_embeddings + extra_rows < positions

        monkeypatch.setattr(token_tables, "table_applies", choose)
        monkeypatch.setattr("fairseq_monoattn.models.gru_seq2seq.table_applies", choose)
        torch.manual_seed(4)  # the same dropout masks
        logits, _ = model(**sample["net_input"])
        lprobs = F.log_softmax(logits, dim=-1)
        loss = F.nll_loss(lprobs.view(-1, lprobs.size(-1)), sample["target"].view(-1), ignore_index=dictionary.pad())
        loss.backward()
        # the encoder's and, on the fast path, the decoder's input gates (the reference embeds its tokens)
        assert len(taken) == (2 if model.fast_path is not None else 1)
        runs.append((lprobs.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}))
    (got, got_grads), (want, want_grads) = runs
    assert torch.allclose(got, want, rtol=0, atol=1e-12)
    assert got_grads.keys() == want_grads.keys()
    for name in want_grads:
        assert torch.allclose(got_grads[name], want_grads[name], rtol=0, atol=1e-12), name
    assert want_grads["encoder.embed_tokens.weight"][dictionary.pad()].abs().sum() == 0


def test_decoding_makes_the_table_once_and_steps_as_the_full_pass(monkeypatch):
    """Incremental decoding keeps the decoder's table in its state: made at the first step that
    has more positions than the vocabulary has rows, read by every later step, and the logits of
    every step equal the full pass's (float64)."""
    import fairseq_monoattn.fast_path as fast_path

    dictionary = digit_dictionary()
    sources = [list("31415926"), list("2718"), list("14142")] * 6  # 18 rows: more than 14 symbols
    sample = batch(dictionary, sources, [s[::-1] for s in sources])
    model = build("gru_mix_monoattn", dictionary, seed=5).double()
    made = []
    real = token_tables.token_table

    def counting(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(fast_path, "token_table", counting)
    net_input = sample["net_input"]
    with torch.no_grad():
        encoder_out = model.encoder(net_input["src_tokens"], net_input["src_lengths"])
        full, _ = model.decoder(net_input["prev_output_tokens"], encoder_out)
        state = {}
        steps = [
            model.decoder(net_input["prev_output_tokens"][:, : t + 1], encoder_out, incremental_state=state)[0]
            for t in range(net_input["prev_output_tokens"].size(1))
        ]
    assert len(made) == 1
    assert torch.allclose(torch.cat(steps, dim=1), full, rtol=0, atol=1e-12)
