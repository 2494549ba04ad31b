"""Batches gathered from the binarized token files with array operations.

fairseq's ``LanguagePairDataset`` builds a batch one example at a time: a tensor per example from
the memory-mapped file, then ``collate``, which pads, sorts and shifts them in Python loops, a cost
paid at every update.  ``ArrayPairDataset`` is the same dataset with one change: the data loader
hands it a batch's indices (``__getitems__``) and ``collater`` gathers every row of the batch from
the token file at once.  The batch is the one fairseq's ``collate`` makes, tensor for tensor: the
same padding side, the same order (sorted by source length with the same ``torch.sort``), the
same shifted decoder input, the same ``ntokens``; ``tests/test_batches.py`` compares them.

A dataset that uses anything this does not reproduce (alignments, constraints, added or removed
BOS/EOS, language ids, buckets, padding to a multiple, a concatenation of shards, a source-only
split) is left as fairseq made it.
"""

import numpy as np
import torch
from fairseq.data import LanguagePairDataset
from fairseq.data.indexed_dataset import MMapIndexedDataset


class IndexBatch(list):
    """The indices of one batch, as ``ArrayPairDataset.__getitems__`` hands them to ``collater``."""


class TokenFile:
    """One binarized split side (fairseq's mmap format): row i is ``tokens[starts[i]:starts[i] + sizes[i]]``."""

    def __init__(self, dataset: MMapIndexedDataset):
        index = dataset._index
        self.tokens = np.frombuffer(dataset._bin_buffer, dtype=index.dtype)
        self.starts = index._pointers // index.dtype().itemsize
        self.sizes = index.sizes.astype(np.int64)

    @staticmethod
    def readable(dataset) -> bool:
        index = getattr(dataset, "_index", None)
        return type(dataset) is MMapIndexedDataset and hasattr(index, "_pointers") and hasattr(dataset, "_bin_buffer")

    def positions(self, rows: np.ndarray, left_pad: bool):
        """For a batch of ``rows`` padded to the longest: each cell's position in its sequence
        (negative or past the end in the padding) and whether the cell holds a token."""
        lengths = self.sizes[rows]
        width = int(lengths.max()) if len(rows) else 0
        position = np.broadcast_to(np.arange(width), (len(rows), width))
        if left_pad:
            position = position - (width - lengths)[:, None]
        return position, (position >= 0) & (position < lengths[:, None])

    def gather(self, rows: np.ndarray, position: np.ndarray, filled: np.ndarray, pad: int) -> np.ndarray:
        """tokens[starts[row] + position] where ``filled``, ``pad`` elsewhere, as int64."""
        cells = self.starts[rows][:, None] + np.where(filled, position, 0)
        cells = np.minimum(cells, max(len(self.tokens) - 1, 0))
        picked = self.tokens[cells] if len(self.tokens) else np.zeros(cells.shape, dtype=np.int64)
        return np.where(filled, picked.astype(np.int64), pad)


class ArrayPairDataset(LanguagePairDataset):
    """fairseq's ``LanguagePairDataset`` whose batches are gathered with array operations (the
    module's docstring says what is the same)."""

    @classmethod
    def from_dataset(cls, dataset):
        """The same data as ``dataset`` with array batches, or ``dataset`` itself where it uses
        something the array batches do not reproduce."""
        plain = (
            type(dataset) is LanguagePairDataset
            and dataset.tgt is not None
            and TokenFile.readable(dataset.src)
            and TokenFile.readable(dataset.tgt)
            and dataset.align_dataset is None
            and dataset.constraints is None
            and not (dataset.append_eos_to_target or dataset.append_bos or dataset.remove_eos_from_source)
            and dataset.src_lang_id is None
            and dataset.tgt_lang_id is None
            and dataset.buckets is None
            and dataset.pad_to_multiple == 1
        )
        if not plain:
            return dataset
        return cls(
            dataset.src,
            dataset.src_sizes,
            dataset.src_dict,
            dataset.tgt,
            dataset.tgt_sizes,
            dataset.tgt_dict,
            left_pad_source=dataset.left_pad_source,
            left_pad_target=dataset.left_pad_target,
            shuffle=dataset.shuffle,
            input_feeding=dataset.input_feeding,
            eos=dataset.eos,
        )

    def token_files(self):
        """The source and target token files, opened on first use (in each data-loading process:
        they are not pickled with the dataset)."""
        if getattr(self, "_token_files", None) is None:
            self._token_files = TokenFile(self.src), TokenFile(self.tgt)
        return self._token_files

    def __getstate__(self):
        return {key: value for key, value in self.__dict__.items() if key != "_token_files"}

    def __getitems__(self, indices):
        return IndexBatch(indices)

    def collater(self, samples, pad_to_length=None):
        if not isinstance(samples, IndexBatch):
            return super().collater(samples, pad_to_length)
        if pad_to_length is not None or len(samples) == 0:
            return super().collater([self[i] for i in samples], pad_to_length)
        pad, eos = self.src_dict.pad(), self.eos
        source_file, target_file = self.token_files()
        rows = np.asarray(samples, dtype=np.int64)
        source = torch.from_numpy(source_file.gather(rows, *source_file.positions(rows, self.left_pad_source), pad))
        # fairseq counts the non-pad tokens of each example and sorts by that count, longest first
        source_lengths, order = source.ne(pad).long().sum(1).sort(descending=True)
        position, filled = target_file.positions(rows, self.left_pad_target)
        target = torch.from_numpy(target_file.gather(rows, position, filled, pad))
        batch = {
            "id": torch.from_numpy(rows).index_select(0, order),
            "nsentences": len(rows),
            "ntokens": target.ne(pad).long().sum().item(),
            "net_input": {"src_tokens": source.index_select(0, order), "src_lengths": source_lengths},
            "target": target.index_select(0, order),
        }
        if self.input_feeding:
            # the decoder's input: EOS, then the target without its last token (y_0 = EOS, y_t = target_{t-1})
            shifted = target_file.gather(rows, position - 1, filled & (position > 0), pad)
            shifted[filled & (position == 0)] = eos
            batch["net_input"]["prev_output_tokens"] = torch.from_numpy(shifted).index_select(0, order)
        return batch
