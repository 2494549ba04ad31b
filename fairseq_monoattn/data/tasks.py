"""Registry of tasks: name -> where its builder lives, plus a one-line description.

Task modules are imported only when their task is used, so one module missing or failing
to import never breaks the others.  A builder given ``data_dir=None`` (no ``--data-dir``)
reads its task's own default data, or says what it needs.
"""
import importlib
from dataclasses import dataclass
from typing import Optional

from .common import DataError, TaskBuilder

DEFAULT_SEED = 1  # the same for every task


@dataclass(frozen=True)
class Task:
    module: str  # module inside this package
    builder: str  # name of the build(seed, data_dir) function in that module
    description: str
    # the way the output walks the input: "forward" (left to right), "reversed", or None when
    # no one way does (a direction gate that reads the other way must undo it)
    reading: Optional[str] = None
    # the task's source data is not in the repository: preparing it needs --data-dir
    needs_data_dir: bool = False

    def load(self) -> TaskBuilder:
        """The build(seed, data_dir) function of this task."""
        module_name = f"{__package__}.{self.module}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name != module_name:
                raise
            raise DataError(f"{module_name} is not available in this checkout") from None
        return getattr(module, self.builder)


TASKS = {
    "copy": Task("digits", "build_copy", "copy the digits", "forward"),
    "reverse_copy": Task("digits", "build_reverse_copy", "copy the digits in reverse order", "reversed"),
    "recopy": Task("digits", "build_recopy", "write each digit d 1 (d<=3), 3 (d<=6) or 5 times", "forward"),
    "reverse_recopy": Task("digits", "build_reverse_recopy", "ReCopy of the reversed digits", "reversed"),
    "inv_recopy": Task("digits", "build_inv_recopy", "recover the digits from their ReCopy", "forward"),
    "inv_reverse_recopy": Task("digits", "build_inv_reverse_recopy",
                               "recover the digits from their Reverse ReCopy", "reversed"),
    "dedupe": Task("digits", "build_dedupe", "remove contiguous repetitions", "forward"),
    "posretrieve": Task("digits", "build_posretrieve",
                        "for each digit d, output `d : X[d] ;` (the token at position d)"),
    "lookup": Task("lookup", "build_lookup", "compose 3-bit lookup tables left to right", "forward"),
    "reverse_lookup": Task("lookup", "build_reverse_lookup",
                           "compose 3-bit lookup tables, mirrored input", "reversed"),
    "scan": Task("scan", "build_scan", "SCAN length split (commands -> actions)"),
    "cfq": Task("cfq", "build_cfq", "CFQ length split (questions -> SPARQL)", needs_data_dir=True),
}
