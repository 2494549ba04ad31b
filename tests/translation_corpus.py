"""A small made-up parallel corpus with subword (BPE-style "@@ ") segmentation.

Source and target use different vocabularies; every source word has one translation,
and the target moves the sentence's last word to the front (a little reordering)."""

import random

SYLLABLES = ["ka", "lo", "mi", "ru", "sen", "ta", "vo", "ni", "pe", "dar"]
TARGET_SYLLABLES = ["zu", "ek", "ol", "bri", "an", "tho", "gi", "me", "us", "far"]


def make_words(rng, syllables, count):
    words = set()
    while len(words) < count:
        words.add(tuple(rng.choice(syllables) for _ in range(rng.randint(1, 3))))
    return sorted(words)


def segment(word):
    """Subword units joined by '@@ ' as subword-nmt writes them."""
    return "@@ ".join(word)


def corpus(seed=0, sizes=(("train", 2000), ("valid", 100), ("test", 100)), vocabulary=40):
    rng = random.Random(seed)
    source_words = make_words(rng, SYLLABLES, vocabulary)
    target_words = make_words(rng, TARGET_SYLLABLES, vocabulary)
    rng.shuffle(target_words)
    lexicon = dict(zip(source_words, target_words))
    splits = {}
    for split, size in sizes:
        pairs = []
        for _ in range(size):
            sentence = [rng.choice(source_words) for _ in range(rng.randint(3, 8))]
            translation = [lexicon[w] for w in sentence[-1:] + sentence[:-1]]
            pairs.append((" ".join(segment(w) for w in sentence), " ".join(segment(w) for w in translation)))
        splits[split] = pairs
    return splits


def write(splits, folder):
    folder.mkdir(parents=True, exist_ok=True)
    for split, pairs in splits.items():
        (folder / f"{split}.src").write_text("".join(s + "\n" for s, _ in pairs))
        (folder / f"{split}.tgt").write_text("".join(t + "\n" for _, t in pairs))


if __name__ == "__main__":
    import sys
    from pathlib import Path

    if len(sys.argv) != 2:
        raise SystemExit("usage: python tests/translation_corpus.py OUT_DIR")
    write(corpus(), Path(sys.argv[1]))
