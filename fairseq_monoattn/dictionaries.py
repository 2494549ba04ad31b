"""A model of the plugin carries the symbols of the dictionaries it was built on, and refuses a
checkpoint trained on other ones: a model run on the same symbols in another order (a separate
fairseq-preprocess run can produce one) would otherwise read every token as another and report a
wrong score without a word.

Both models (``gru_seq2seq.py``, ``transformer_monoattn.py``) add a :class:`TrainedDictionaries`
module when they are built for a task, whichever task it is (fairseq's ``translation``, the
plugin's ``length_generalization``, under fairseq-train or fairseq-hydra-train).  It keeps each
side's symbols as a buffer (their UTF-8 bytes), so the checkpoint's ``model`` state holds them; loading that state
into a model built on the data's dictionaries (fairseq-generate, fairseq-interactive,
fairseq-monoattn-score, fairseq-monoattn-plot-attention, ``from_pretrained``, resuming a
training) compares them symbol for symbol first.  Checkpoints written before the symbols were
stored load without the comparison; those of the ``length_generalization`` task from then kept
them in the task's state, which the task still compares (:func:`check_task_state`).

fairseq's loaders do not tell the model which file it is loading, so :func:`loading_checkpoint`
reads the file's name off the loader's frame up the call stack (``load_model_ensemble_and_task``,
which the commands and the hub interface go through, and the trainer's ``load_checkpoint``) to put
it into the error: one line naming both files."""

import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch
from torch import nn

from .errors import PluginError

SIDES = ("source", "target")


class DictionaryMismatch(PluginError, ValueError):
    """The checkpoint's dictionary is not the data's; the message names the checkpoint (where the
    loader knows it), the data's dictionary file and the first difference."""

    def __init__(self, side: str, data_file, difference: str, checkpoint=None):
        super().__init__(side, data_file, difference, checkpoint)
        self.side, self.data_file, self.difference, self.checkpoint = side, data_file, difference, checkpoint

    def __str__(self) -> str:
        checkpoint = self.checkpoint or "the checkpoint"
        where = self.data_file or f"the data's {self.side} dictionary"
        return (
            f"{checkpoint} was trained with another {self.side} dictionary than {where}: {self.difference}; "
            f"use it on data binarized with the dictionaries it was trained with "
            f"(fairseq-preprocess --srcdict/--tgtdict the training data's dict.*.txt)"
        )


def symbols(dictionary) -> List[str]:
    return list(dictionary.symbols)


def first_difference(trained: Sequence[str], data: Sequence[str]) -> str:
    for index, (a, b) in enumerate(zip(trained, data)):
        if a != b:
            return f"symbol {index} is {a!r} in the checkpoint and {b!r} in the data"
    longer = "the checkpoint" if len(trained) > len(data) else "the data"
    return f"{longer} has {abs(len(trained) - len(data))} more symbols ({len(trained)} against {len(data)})"


def check_dictionaries(
    trained: Dict[str, Sequence[str]], current: Dict[str, Sequence[str]], files: Dict[str, Optional[Path]]
) -> None:
    """Raise DictionaryMismatch unless every side's symbols (in order) are the same."""
    for side, wanted in trained.items():
        have = current.get(side)
        if have is None or list(have) == list(wanted):
            continue
        raise DictionaryMismatch(side, files.get(side), first_difference(wanted, have), loading_checkpoint())


def dictionary_files(task) -> Dict[str, Optional[Path]]:
    """{side: the data's dict.LANG.txt} of a translation-style task (its ``cfg.data`` and
    languages), None where the task does not say."""
    cfg = getattr(task, "cfg", None)
    data = getattr(cfg, "data", None)
    languages = {"source": getattr(cfg, "source_lang", None), "target": getattr(cfg, "target_lang", None)}
    if not data:
        return dict.fromkeys(SIDES)
    from fairseq.utils import split_paths

    folder = Path(split_paths(str(data))[0])
    return {side: folder / f"dict.{lang}.txt" if lang else None for side, lang in languages.items()}


# --- in the model ------------------------------------------------------------------------------

SEPARATOR = "\n"  # no symbol of a fairseq dictionary holds one (dict.txt is a symbol a line)


def encode_symbols(names: Sequence[str]) -> torch.Tensor:
    """The symbols as one tensor of their UTF-8 bytes (a newline between two), for a buffer: int32,
    so that fairseq's checkpoint averaging (the sum of N states, divided by N) keeps them."""
    data = SEPARATOR.join(names).encode("utf-8")
    return torch.tensor(list(data), dtype=torch.int32)


def decode_symbols(tensor: torch.Tensor) -> List[str]:
    """:func:`encode_symbols` undone; a state converted to another dtype (``.double()``, an EMA copy
    in float32) holds the same byte values."""
    data = bytes(tensor.detach().to("cpu", torch.float64).round().long().tolist())
    return data.decode("utf-8").split(SEPARATOR) if data else []


class TrainedDictionaries(nn.Module):
    """The symbols of the source and target dictionaries a model was built on, as two buffers
    (``source``, ``target``) in the model's state.  Loading a state that holds other symbols
    raises DictionaryMismatch naming ``files`` (the data's dict.*.txt); a state without them (a
    checkpoint from before) loads as it did."""

    def __init__(self, source_dictionary, target_dictionary, files: Optional[Dict[str, Optional[Path]]] = None):
        super().__init__()
        self.files = dict(files or dict.fromkeys(SIDES))
        for side, dictionary in zip(SIDES, (source_dictionary, target_dictionary)):
            self.register_buffer(side, encode_symbols(symbols(dictionary)))

    def symbols(self) -> Dict[str, List[str]]:
        return {side: decode_symbols(getattr(self, side)) for side in SIDES}

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):  # fmt: skip
        # the buffers already hold the data's symbols: compare, never copy (nor report a missing key)
        trained = {side: decode_symbols(state_dict[prefix + side]) for side in SIDES if prefix + side in state_dict}
        check_dictionaries(trained, self.symbols(), self.files)

    def extra_repr(self) -> str:
        return ", ".join(f"{side}={len(names)} symbols" for side, names in self.symbols().items())


def carry_dictionaries(model: nn.Module, task) -> nn.Module:
    """Give ``model`` (built for ``task``) the task's dictionaries to keep (``model.dictionaries``)."""
    model.dictionaries = TrainedDictionaries(task.source_dictionary, task.target_dictionary, dictionary_files(task))
    return model


def is_dictionary_entry(key: str) -> bool:
    """Whether a model state key is one of TrainedDictionaries' buffers, not a weight."""
    return key in {f"dictionaries.{side}" for side in SIDES}


def check_task_state(task, task_state: dict) -> dict:
    """The ``length_generalization`` task's checkpoints from before the models kept their
    dictionaries stored them in the task's state: compare those, and return the rest."""
    task_state = dict(task_state or {})
    trained = task_state.pop("dictionaries", None)
    if trained is not None:
        current = {"source": symbols(task.source_dictionary), "target": symbols(task.target_dictionary)}
        check_dictionaries(trained, current, dictionary_files(task))
    return task_state


# --- the checkpoint's name in the error ---------------------------------------------------------

# fairseq's functions that read a checkpoint file into a model, and the local variable that holds
# the file's name while they do: the commands and the hub interface go through the first, resuming
# a training through the second
CHECKPOINT_LOADERS = {
    ("checkpoint_utils.py", "load_model_ensemble_and_task"): "filename",
    ("trainer.py", "load_checkpoint"): "filename",
}


def loading_checkpoint() -> Optional[str]:
    """The checkpoint file that a fairseq loader up the call stack is reading, or None.  Read off
    the loader's frame (nothing of fairseq is replaced): fairseq does not hand the file's name to
    the model whose state it loads."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        name = CHECKPOINT_LOADERS.get((Path(code.co_filename).name, code.co_name))
        if name is not None and frame.f_globals.get("__name__", "").startswith("fairseq"):
            value = frame.f_locals.get(name)
            return None if value is None else str(value)
        frame = frame.f_back
    return None
