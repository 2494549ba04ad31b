"""Every binarized split loads through fairseq's translation task with the right number of
examples, and decodes back to its raw line followed by EOS."""

import pytest

TASK_SPLITS = [
    (task, split)
    for task in ("copy", "inv_recopy", "dedupe", "posretrieve")
    for split in ("train", "valid", "test100", "test_iid")
]
TASK_SPLITS += [("scan", split) for split in ("train", "valid", "test")]


@pytest.fixture(scope="module")
def load_split():
    """load_split(folder, split) -> fairseq LanguagePairDataset, as fairseq-train sees it."""
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    def load(folder, split):
        config = TranslationConfig(data=str(folder / "bin"), source_lang="src", target_lang="tgt", dataset_impl="mmap")
        task = TranslationTask.setup_task(config)
        task.load_dataset(split)
        return task.dataset(split)

    return load


def decode(dictionary, ids):
    assert ids[-1].item() == dictionary.eos()
    assert dictionary.unk() not in ids.tolist()
    return " ".join(dictionary[i] for i in ids[:-1].tolist())


@pytest.mark.parametrize("task,split", TASK_SPLITS)
def test_split_loads_in_fairseq_and_decodes_to_raw(prepared, load_split, task, split):
    data = prepared(task)
    dataset = load_split(data.out, split)
    sources, targets = data.lines(split, "src"), data.lines(split, "tgt")
    assert len(dataset) == len(sources) == data.manifest["splits"][split]["size"]
    for index in range(len(dataset)):
        assert decode(dataset.src_dict, dataset.src[index]) == sources[index]
        assert decode(dataset.tgt_dict, dataset.tgt[index]) == targets[index]


def test_dictionaries_list_train_tokens_by_count_then_token(prepared):
    data = prepared("scan")
    for lang in ("src", "tgt"):
        entries = [line.split() for line in (data.out / "bin" / f"dict.{lang}.txt").read_text().splitlines()]
        counts = [(-int(count), token) for token, count in entries]
        assert counts == sorted(counts)
        train_tokens = {tok for line in data.lines("train", lang) for tok in line.split()}
        assert {token for token, _ in entries} == train_tokens  # SCAN test needs nothing new
