"""Drop-in for ordinary translation: trained with fairseq's own `translation` task, separate source
and target dictionaries, BPE-style subwords, beam 5 and sacreBLEU, all through the console scripts;
generated with the plugin's task, which keeps every test sentence (docs/fairseq.md)."""

import re

import pytest
import translation_corpus
from fairseq_cli_helpers import USER_DIR, hypotheses, run_command


@pytest.fixture(scope="module")
def binarized(tmp_path_factory):
    """The corpus binarized by fairseq-preprocess once, for both trainings: (splits, data folder)."""
    root = tmp_path_factory.mktemp("translation")
    splits = translation_corpus.corpus(seed=0)
    translation_corpus.write(splits, root / "raw")
    raw, data = root / "raw", root / "bin"
    run_command(
        "fairseq-preprocess",
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
        "--trainpref",
        f"{raw}/train",
        "--validpref",
        f"{raw}/valid",
        "--testpref",
        f"{raw}/test",
        "--destdir",
        str(data),
        "--workers",
        "1",
    )
    return splits, data


@pytest.mark.parametrize(
    "arch, lr, epochs",
    [  # Transformers want a lower lr
        pytest.param("gru_mix_onestep", "3e-3", "6", marks=pytest.mark.long(26)),
        pytest.param("transformer_mix_onestep", "1e-3", "10", marks=pytest.mark.long(47)),
    ],
)
def test_translation_task_end_to_end(tmp_path, binarized, arch, lr, epochs):
    splits, data = binarized
    src_dict = (data / "dict.src.txt").read_text().split()[::2]
    tgt_dict = (data / "dict.tgt.txt").read_text().split()[::2]
    assert not set(src_dict) & set(tgt_dict)  # really two vocabularies
    run_command(
        "fairseq-train",
        str(data),
        "--user-dir",
        USER_DIR,
        "--task",
        "translation",
        "--arch",
        arch,
        "--optimizer",
        "adam",
        "--lr",
        lr,
        "--clip-norm",
        "5",
        "--batch-size",
        "32",
        "--max-epoch",
        epochs,
        "--save-dir",
        str(tmp_path / "ck"),
        "--no-epoch-checkpoints",
        "--no-progress-bar",
        "--seed",
        "1",
    )
    out = run_command(
        "fairseq-generate",
        str(data),
        "--user-dir",
        USER_DIR,
        "--path",
        str(tmp_path / "ck" / "checkpoint_last.pt"),
        # the plugin's task: every test sentence (fairseq's translation task drops the 4 past the
        # last multiple of 8) and the Transformer's checkpoint read (docs/fairseq.md)
        "--task",
        "length_generalization",
        "--beam",
        "5",
        "--scoring",
        "sacrebleu",
        "--remove-bpe",
        "--batch-size",
        "32",
    )
    found = hypotheses(out.splitlines())
    assert sorted(found) == list(range(len(splits["test"])))
    assert not any("@@" in text for text in found.values())  # subwords merged back
    bleu = float(re.search(r"BLEU = ([0-9.]+)", out).group(1))
    assert bleu > 30, out[-500:]  # GRU about 60, Transformer about 45 on this machine; an untrained model ~1
