"""Attention pictures: the library's matrix and labels, the PNG command, and the diagonal
that a trained OneStep model draws on Copy."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from fairseq.data import data_utils
from fairseq.sequence_generator import SequenceGenerator
from fairseq_cli_helpers import train, write_copy_dataset
from PIL import Image

from fairseq_monoattn import attention_plots
from fairseq_monoattn.attention_maps import AttentionMapError, LoadedModel, attention_map, load_checkpoint
from fairseq_monoattn.cli import plot_attention
from fairseq_monoattn.testing import build, digit_dictionary, rounding_tolerance

HELD_OUT = "5 2 8 8 1 0 3 9 4 6 2 7"  # length 12; training examples have 3 to 8 digits
# the source </s> kept, so that the columns are START, tokens, </s>, END (the presets drop it;
# test_without_source_eos_the_columns_have_no_eos covers that layout)
TRAIN = [
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--clip-norm",
    "5",
    "--batch-size",
    "32",
    "--seed",
    "1",
    "--no-progress-bar",
    "--num-workers",
    "0",
    "--disable-validation",
    "--no-epoch-checkpoints",
    "--no-save-optimizer-state",
    "--source-eos",
    "True",
]


@pytest.fixture(scope="module")
def copy_data(tmp_path_factory):
    sizes = {"train": (512, 3, 8), "valid": (16, 5, 8), "test": (16, 5, 8)}
    return write_copy_dataset(tmp_path_factory.mktemp("attention") / "copy", sizes) / "bin"


@pytest.fixture(scope="module")
def checkpoints(copy_data, tmp_path_factory):
    """gru_onestep trained until it copies (150 updates, ~5 s) and a barely trained gru_content."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model; two threads on a busy 2-core machine run 10x slower
    try:
        paths = {}
        for arch, updates in (("gru_onestep", 150), ("gru_content", 3)):
            save = tmp_path_factory.mktemp(arch)
            train([str(copy_data), "--arch", arch, *TRAIN, "--max-update", str(updates), "--save-dir", str(save)])
            paths[arch] = save / "checkpoint_last.pt"
        yield paths
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def onestep(checkpoints, copy_data):
    return load_checkpoint(checkpoints["gru_onestep"], copy_data)


# -- the library ---------------------------------------------------------------------------


def test_matrix_is_the_models_attention_for_that_input(onestep):
    result = attention_map(onestep, "4 7 9 8")
    model, src_dict, tgt_dict = onestep.model, onestep.task.source_dictionary, onestep.task.target_dictionary
    # recompute: the same source inside a left-padded batch with a longer one, one forward pass
    sources = [src_dict.encode_line(s, add_if_not_exist=False).long() for s in ("4 7 9 8", "1 2 3 4 5 6 7 8")]
    output = [tgt_dict.index(t) for t in result.output_labels]
    prev = torch.tensor([[tgt_dict.eos()] + output[:-1]] * 2)
    src_tokens = data_utils.collate_tokens(sources, src_dict.pad(), left_pad=True)
    with torch.no_grad():
        _, extra = model(src_tokens, torch.tensor([len(s) for s in sources]), prev)
    expected = extra["attention"][0, :, : 4 + 3].numpy()
    assert result.matrix.shape == (len(output), 7)
    np.testing.assert_allclose(result.matrix, expected, atol=1e-6)
    np.testing.assert_allclose(result.matrix.sum(axis=1), 1.0, atol=1e-5)


def test_teacher_forced_attention_matches_the_decoding_steps(checkpoints, copy_data):
    """fairseq's own generator, asked for alignments, saw the same weights step by step."""
    loaded = load_checkpoint(checkpoints["gru_onestep"], copy_data)
    result = attention_map(loaded, "3 1 4 1 5")
    loaded.model.decoder.make_generation_fast_(need_attn=True)
    generator = SequenceGenerator([loaded.model], loaded.task.target_dictionary, beam_size=1)
    src = loaded.task.source_dictionary.encode_line("3 1 4 1 5", add_if_not_exist=False).long().unsqueeze(0)
    sample = {"id": torch.tensor([0]), "net_input": {"src_tokens": src, "src_lengths": torch.tensor([6])}}
    with torch.no_grad():
        (hypo,) = generator.generate([loaded.model], sample)[0]
    # fairseq's layout: (source tokens incl. </s>, output steps), without START / END
    np.testing.assert_allclose(result.matrix[:, 1:-1], hypo["attention"].T.numpy(), atol=1e-5)


def test_labels_and_hypothesis(onestep):
    result = attention_map(onestep, "4 7 9 8")
    assert result.source_labels == ["START", "4", "7", "9", "8", "</s>", "END"]
    assert result.output_labels[-1] == "</s>"
    assert result.hypothesis == " ".join(result.output_labels[:-1])
    assert result.architecture == "gru_onestep" and not result.forced and not result.eos_forced
    assert 0.0 <= result.direction <= 1.0


def test_forced_target(onestep):
    result = attention_map(onestep, "4 7 9 8", target="1 1 1 1 1 1")
    assert result.forced and result.hypothesis == "1 1 1 1 1 1"
    assert result.output_labels == ["1"] * 6 + ["</s>"] and result.matrix.shape == (7, 7)


def test_length_limit_is_reported(onestep):
    result = attention_map(onestep, "4 7 9 8", max_len_a=0, max_len_b=2)
    assert result.output_labels == ["4", "7", "</s>"] and result.eos_forced


def test_unknown_tokens_are_named(onestep):
    with pytest.raises(AttentionMapError, match=r"source.*'x', 'yz'"):
        attention_map(onestep, "4 x 7 yz x")
    with pytest.raises(AttentionMapError, match=r"target.*'<unk>'"):
        attention_map(onestep, "4 7", target="4 <unk>")
    with pytest.raises(AttentionMapError, match="empty"):
        attention_map(onestep, "   ")


def test_missing_checkpoint_or_data(checkpoints, copy_data, tmp_path):
    with pytest.raises(AttentionMapError, match="checkpoint not found"):
        load_checkpoint(tmp_path / "nope.pt", copy_data)
    with pytest.raises(AttentionMapError, match="data folder not found"):
        load_checkpoint(checkpoints["gru_onestep"], tmp_path / "nope")
    with pytest.raises(AttentionMapError, match="no fairseq dictionaries"):
        load_checkpoint(checkpoints["gru_onestep"], tmp_path)


def test_onestep_trained_on_copy_attends_along_the_diagonal(onestep):
    """Trained on lengths 3-8, it copies a length-12 input, one source position per step."""
    result = attention_map(onestep, HELD_OUT)
    assert result.hypothesis == HELD_OUT
    assert result.direction > 0.5  # reads left to right
    steps = result.matrix.argmax(axis=1)
    assert (np.diff(steps) > 0).all(), steps  # strictly forward
    assert steps.tolist() == list(range(1, len(HELD_OUT.split()) + 2))  # x_1 .. x_n, then </s>


def built(arch, seed=0, **options):
    """An untrained model of ``arch`` over the digits, wrapped as load_checkpoint returns it."""
    dictionary = digit_dictionary()
    task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    return LoadedModel(build(arch, dictionary, seed=seed, **options), task, arch, Path("unsaved.pt"))


def pass_beside_a_longer_source(loaded, source, target):
    """The decoder's extra of one teacher-forced pass over a left-padded batch of ``source`` and
    a longer source, both forced to ``target``."""
    d = loaded.task.source_dictionary
    sources = [d.encode_line(s, add_if_not_exist=False).long() for s in (source, "1 2 3 4 5 6 7 8 9 0 1")]
    prev = torch.tensor([[d.eos()] + [d.index(t) for t in target.split()]] * 2)
    src_tokens = data_utils.collate_tokens(sources, d.pad(), left_pad=True)
    with torch.no_grad():
        _, extra = loaded.model.eval()(src_tokens, torch.tensor([len(s) for s in sources]), prev)
    return extra


def test_without_source_eos_the_columns_have_no_eos():
    """--source-eos False: the encoder drops fairseq's </s>, and so do the labels and the matrix."""
    with_eos = attention_map(built("gru_onestep", seed=2, source_eos=True), "4 7 9 8", target="4 7 9 8")
    loaded = built("gru_onestep", seed=2, source_eos=False)
    assert not loaded.model.encoder.keep_source_eos
    result = attention_map(loaded, "4 7 9 8", target="4 7 9 8")
    assert with_eos.source_labels == ["START", "4", "7", "9", "8", "</s>", "END"]
    assert result.source_labels == ["START", "4", "7", "9", "8", "END"]
    assert result.matrix.shape == (5, 6) and with_eos.matrix.shape == (5, 7)
    assert len(result.attended_labels) == result.matrix.shape[1]
    np.testing.assert_allclose(result.matrix.sum(axis=1), 1.0, atol=1e-5)
    # the model's own attention in a batch with a longer source: no column past END carries weight
    extra = pass_beside_a_longer_source(loaded, "4 7 9 8", "4 7 9 8")
    np.testing.assert_allclose(result.matrix, extra["attention"][0, :, :6].numpy(), atol=1e-6)
    np.testing.assert_allclose(extra["attention"][0, :, 6:].numpy(), 0.0, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 3])
def test_direction_is_the_models_direction_gate(seed):
    """``direction`` is g of model.direction_gate for the same source (the decoder's extra["direction"])."""
    loaded = built("gru_onestep", seed=seed)
    result = attention_map(loaded, "5 2 8 8 1", target="5 2 8 8 1")
    src = loaded.task.source_dictionary.encode_line("5 2 8 8 1", add_if_not_exist=False).long().unsqueeze(0)
    with torch.no_grad():
        gate = loaded.model.direction_gate(src, torch.tensor([src.size(1)]))
    assert gate.shape == (1,)
    assert result.direction == pytest.approx(float(gate[0]), abs=1e-6)
    assert result.reads_reversed == (float(gate[0]) < 0.5)


def test_trained_direction_is_the_models_direction_gate(onestep):
    result = attention_map(onestep, HELD_OUT)
    src = onestep.task.source_dictionary.encode_line(HELD_OUT, add_if_not_exist=False).long().unsqueeze(0)
    with torch.no_grad():
        gate = onestep.model.direction_gate(src, torch.tensor([src.size(1)]))
    assert result.direction == pytest.approx(float(gate[0]), abs=1e-6)


def test_no_direction_without_a_gate():
    result = attention_map(built("gru_content"), "4 7 9 8", target="4 7")
    assert result.direction is None and not result.reads_reversed
    assert result.attended_labels == result.source_labels


# -- the command -----------------------------------------------------------------------------


def png_size(path):
    with Image.open(path) as image:
        assert image.format == "PNG"
        return image.size


def test_the_installed_command_exits_0_after_writing_the_png(checkpoints, copy_data, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "attention.png"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "fairseq-monoattn-plot-attention"),
            "--checkpoint",
            str(checkpoints["gru_onestep"]),
            "--data",
            str(copy_data),
            "--source",
            "4 7 9",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert png_size(out)[0] > 0 and f"wrote {out}" in done.stdout
    assert done.stderr == ""  # no return value dumped


def test_cli_writes_a_png_of_the_expected_size(checkpoints, copy_data, tmp_path, capsys):
    out = tmp_path / "attention.png"
    (result,) = plot_attention.plot(
        [
            "--checkpoint",
            str(checkpoints["gru_onestep"]),
            "--data",
            str(copy_data),
            "--source",
            "4 7 9 8",
            "--out",
            str(out),
            "--title",
            "Copy",
        ]
    )
    assert png_size(out) == attention_plots.expected_pixels([result.matrix.shape])
    assert f"greedy output: {result.hypothesis}" in capsys.readouterr().out


def test_cli_grid_of_two_checkpoints(checkpoints, copy_data, tmp_path):
    out = tmp_path / "grid.png"
    results = plot_attention.plot(
        [
            "--checkpoint",
            str(checkpoints["gru_onestep"]),
            str(checkpoints["gru_content"]),
            "--labels",
            "OneStep",
            "Content",
            "--data",
            str(copy_data),
            "--source",
            HELD_OUT,
            "--target",
            HELD_OUT,
            "--out",
            str(out),
        ]
    )
    assert [r.architecture for r in results] == ["gru_onestep", "gru_content"]
    shapes = [r.matrix.shape for r in results]
    assert shapes == [(13, 15), (13, 15)]
    assert png_size(out) == attention_plots.expected_pixels(shapes)
    assert png_size(out)[0] > attention_plots.expected_pixels(shapes[:1])[0]  # two panels side by side


def test_cli_refuses_an_existing_out_unless_forced(checkpoints, copy_data, tmp_path, capsys):
    out = tmp_path / "attention.png"
    out.write_bytes(b"keep me")
    argv = [
        "--checkpoint",
        str(checkpoints["gru_onestep"]),
        "--data",
        str(copy_data),
        "--source",
        "4 7",
        "--out",
        str(out),
    ]
    with pytest.raises(SystemExit):
        plot_attention.plot(argv)
    assert "--out exists" in capsys.readouterr().err and out.read_bytes() == b"keep me"
    plot_attention.plot([*argv, "--force"])
    assert png_size(out)[0] > 0


def test_cli_errors(checkpoints, copy_data, tmp_path, capsys):
    base = ["--data", str(copy_data), "--source", "4 7", "--out", str(tmp_path / "a.png")]
    with pytest.raises(SystemExit):
        plot_attention.plot(["--checkpoint", str(tmp_path / "missing.pt"), *base])
    assert "checkpoint not found" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        plot_attention.plot(
            [
                "--checkpoint",
                str(checkpoints["gru_onestep"]),
                "--data",
                str(copy_data),
                "--source",
                "4 q 7",
                "--out",
                str(tmp_path / "a.png"),
            ]
        )
    assert "'q'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        plot_attention.plot(["--checkpoint", str(checkpoints["gru_onestep"]), "--labels", "A", "B", *base])
    assert "--labels" in capsys.readouterr().err
    assert not (tmp_path / "a.png").exists()


def test_long_inputs_thin_the_tick_labels():
    ticks, thinned = attention_plots.tick_positions(103)
    assert thinned and ticks[0] == 0 and ticks[-1] == 102 and len(ticks) <= attention_plots.MAX_TICKS + 1
    assert attention_plots.tick_positions(20) == (list(range(20)), False)
    assert attention_plots.panel_inches(300, 300) == (attention_plots.MAX_PANEL_INCHES,) * 2


# -- Transformer models ------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["transformer_onestep", "transformer_small"])
def test_a_transformers_matrix_is_its_alignment_over_the_source_tokens(arch):
    """No START or END: the columns are the tokens and </s>, the matrix fairseq's alignment
    (the location weights; the heads' mean for the plain Transformer), the same in a left-padded batch."""
    loaded = built(arch, seed=1)
    result = attention_map(loaded, "4 7 9 8", target="8 9 7 4")
    assert result.source_labels == ["4", "7", "9", "8", "</s>"] and result.matrix.shape == (5, 5)
    np.testing.assert_allclose(result.matrix.sum(axis=1), 1.0, atol=1e-5)
    extra = pass_beside_a_longer_source(loaded, "4 7 9 8", "8 9 7 4")
    alignment = extra["attn"][0][0]  # (T, S): the short source sits in the last 5 columns
    # alone and beside a longer source: two batch shapes, so the same to float rounding only
    np.testing.assert_allclose(result.matrix, alignment[:, -5:].numpy(), atol=rounding_tolerance(alignment.dtype))
    np.testing.assert_allclose(alignment[:, :-5].numpy(), 0.0, atol=1e-6)  # no weight on padding


@pytest.mark.parametrize(
    "keep_end, expected", [(False, ["</s>", "8", "9", "7", "4"]), (True, ["8", "9", "7", "4", "</s>"])]
)
def test_a_reversing_gates_columns_read_from_the_end(keep_end, expected):
    """g < 1/2: the columns read reverse(e); with --direction-gate-keep-end </s> stays last."""
    loaded = built(
        "transformer_onestep",
        seed=1,
        direction_gate_summary="none",
        direction_temperature=50.0,
        direction_gate_keep_end=keep_end,
    )
    with torch.no_grad():
        loaded.model.decoder.layers[-1].encoder_attn.attention.direction_gate.proj.bias.fill_(-0.2)
    result = attention_map(loaded, "4 7 9 8", target="8 9 7 4")
    assert result.direction < 1e-4 and result.reads_reversed and result.keeps_end == keep_end
    assert result.attended_labels == expected


@pytest.mark.parametrize("options", [{}, {"decoder_recency_bias": 0.7}, {"decoder_recency_exempt_start": True}])
def test_decoder_self_attention_weights_give_the_layers_own_output(options):
    """Weights times the layer's values, through its output projection, are the self-attention's
    output in the same pass; rows sum to 1 over steps 0 .. i and are 0 after i."""
    from fairseq_monoattn.attention_maps import decoder_self_attention, encode

    loaded = built("transformer_monoattn_recency", seed=2, **options)
    model = loaded.model
    seen = []  # (input, output) of each layer's self-attention
    hooks = [
        layer.self_attn.register_forward_hook(
            lambda m, a, kw, out: seen.append((kw["query"], out[0])), with_kwargs=True
        )
        for layer in model.decoder.layers
    ]
    d = loaded.task.source_dictionary
    weights = decoder_self_attention(model, encode(d, "4 7 9 8 1", "source"), encode(d, "1 8 9 7 4 4", "target"))
    for hook in hooks:
        hook.remove()
    layers, heads, steps, _ = weights.shape
    assert (layers, heads, steps) == (3, 4, 7) and len(seen) == 3
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-12)
    above = np.triu_indices(steps, 1)
    assert (weights[:, :, above[0], above[1]] == 0).all()
    with torch.no_grad():
        for layer, (query, output) in enumerate(seen):
            attention = model.decoder.layers[layer].self_attn
            v = attention.v_proj(query.squeeze(1)).view(steps, heads, -1).transpose(0, 1)  # (heads, T, d)
            mixed = torch.from_numpy(weights[layer]).float() @ v
            out = attention.out_proj(mixed.transpose(0, 1).reshape(steps, -1))
            np.testing.assert_allclose(out.numpy(), output.squeeze(1).numpy(), atol=1e-5)


def test_with_an_exempt_start_the_weight_on_it_does_not_fade():
    """Queries and keys zeroed, the scores are the mask alone: the start symbol weighs
    e^(-M i) / sum_d e^(-M d) at step i under the recency bias, 1 / (1 + sum_(d < i) e^(-M d)) exempt."""
    from fairseq_monoattn.attention_maps import decoder_self_attention, encode

    for exempt in (False, True):
        loaded = built("transformer_monoattn_recency", seed=2, decoder_recency_exempt_start=exempt)
        with torch.no_grad():
            for layer in loaded.model.decoder.layers:
                layer.self_attn.q_proj.weight.zero_()
                layer.self_attn.q_proj.bias.zero_()
        d = loaded.task.source_dictionary
        weights = decoder_self_attention(
            loaded.model, encode(d, "4 7 9", "source"), encode(d, "9 7 4 4 4 4 4 4", "target")
        )
        i = np.arange(weights.shape[2])
        near = np.array([np.exp(-np.arange(k + 1)).sum() for k in i])  # sum_(d <= i) e^(-d)
        if exempt:
            expected = np.where(i == 0, 1.0, 1.0 / (1.0 + near - np.exp(-i)))
        else:
            expected = np.exp(-i) / near
        np.testing.assert_allclose(weights[:, :, :, 0], np.broadcast_to(expected, weights.shape[:3]), rtol=1e-6)
