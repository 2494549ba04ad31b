"""Facts about every task, in one place: its name and title, how its data is made, the lengths
it trains and tests on, the splits the paper reports, and which way its output reads the input.

Data preparation (which builder), the tables (titles, the paper's splits), the sweeps (which tasks
a table has) and the comparisons (which lengths to show) all read this module.  It imports neither
fairseq nor torch.  The numbers the paper reports are not here: they are the lab's data file
paper_values.tsv, read by its paper_values module.
"""

import importlib
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

DIGIT_SPLITS = ("test15", "test30", "test100")
LOOKUP_SPLITS = ("test7", "test9", "test11")
IID_SPLITS = ("test_iid", "test15", "test30", "test100")  # the paper's IID, 15, 30, 100
DEFAULT_DATA_SEED = 1  # the same for every task


@dataclass(frozen=True)
class SplitPlan:
    """A generated split: ``size`` examples of lengths drawn uniformly from min_length..max_length."""

    name: str
    size: int
    min_length: int
    max_length: int


# The generated digit tasks' splits (the paper's: train 5-10, valid 10-15, tests of exactly 15,
# 30, 100 and an i.i.d. test of 5-10; and, not in the paper, more points of the accuracy-against-
# length curve, smaller, each drawn from its own generator so the paper's splits are unchanged by
# them).  Lengths count the original digits (DeDupe: groups).
DIGIT_SPLIT_PLANS = (
    SplitPlan("train", 10_000, 5, 10),
    SplitPlan("valid", 2_000, 10, 15),
    SplitPlan("test15", 2_000, 15, 15),
    SplitPlan("test30", 2_000, 30, 30),
    SplitPlan("test100", 2_000, 100, 100),
    SplitPlan("test_iid", 2_000, 5, 10),
    SplitPlan("test10", 500, 10, 10),
    SplitPlan("test20", 500, 20, 20),
    SplitPlan("test50", 500, 50, 50),
    SplitPlan("test200", 500, 200, 200),
)
DIGIT_TRAIN_LENGTHS = next((p.min_length, p.max_length) for p in DIGIT_SPLIT_PLANS if p.name == "train")


# --- The field beside the paper: tasks of other length-generalization benchmarks -----------------

# Delétang et al. (ICLR 2023), "Neural Networks and the Chomsky Hierarchy": its transduction tasks
# (the ones answered with an output sequence).  The paper trains on lengths 1..40 (a fresh batch
# each step, its length uniform in 1..40) and tests on every length 41..500.  Here: one fixed,
# seeded training file of 10,000 examples of lengths uniform in 1..40, an i.i.d. valid of 500 (the
# paper has none; fairseq needs one), and ten test splits of 100 examples each at the lengths 50,
# 100, ..., 500, spaced evenly over the paper's test range, so that their mean stands in for the
# paper's mean over all 460 test lengths.  Lengths count source tokens.
DELETANG_TRAIN_SIZE, DELETANG_VALID_SIZE, DELETANG_TEST_SIZE = 10_000, 500, 100
DELETANG_MAX_TRAIN_LENGTH = 40
DELETANG_TEST_LENGTHS = tuple(range(50, 501, 50))
DELETANG_TEST_SPLITS = tuple(f"test{n}" for n in DELETANG_TEST_LENGTHS)


def deletang_split_plans(shortest: int = 1) -> Tuple[SplitPlan, ...]:
    """The splits of a Delétang et al. task whose shortest example has ``shortest`` tokens."""
    top = DELETANG_MAX_TRAIN_LENGTH
    return (
        SplitPlan("train", DELETANG_TRAIN_SIZE, shortest, top),
        SplitPlan("valid", DELETANG_VALID_SIZE, shortest, top),
        *(SplitPlan(f"test{n}", DELETANG_TEST_SIZE, n, n) for n in DELETANG_TEST_LENGTHS),
    )


@dataclass(frozen=True)
class DeletangTask:
    """How Delétang et al. define one of their tasks: its level of the Chomsky hierarchy ("dcf":
    deterministic context-free, "cs": context-sensitive), the shortest input this project draws,
    whether their per-token accuracy counts the position of the termination token that ends the
    answer (the tasks whose answers vary in length), and the token that stands for it in the
    target.  None: the EOS that ends every target stands for it; a token: it is written at the end
    of every target, before the EOS (Stack Manipulation, whose answer may be empty and a target
    cannot)."""

    level: str
    shortest: int = 1
    scores_termination: bool = False
    termination_token: Optional[str] = None

    @property
    def accuracy_key(self) -> str:
        """The per-token accuracy of a scoring run (``metrics.Tally.as_dict``) that is their
        measure: the termination's position is the EOS's, or a target token, or not counted."""
        eos_counted = self.scores_termination and self.termination_token is None
        return "per_token_accuracy_with_eos" if eos_counted else "per_token_accuracy"


DELETANG_TASKS: Dict[str, DeletangTask] = {
    "reverse_string": DeletangTask("dcf"),
    # the original's output token 2 after the final stack (an empty stack: that token alone)
    "stack_manipulation": DeletangTask("dcf", scores_termination=True, termination_token="2"),
    "duplicate_string": DeletangTask("cs"),
    "odds_first": DeletangTask("cs"),
    "bucket_sort": DeletangTask("cs"),
    # the original draws lengths 1 and 2 without a `+` (a lone number, echoed); here every
    # example is an addition, so the shortest is 3 tokens (`1 + 1`)
    "binary_addition": DeletangTask("cs", shortest=3, scores_termination=True),
}

# Newman et al. (2020), "The EOS Decision and Length Extrapolation": SCAN length cutoffs.  Cutoff N
# trains on the commands whose action sequence has at most N actions and tests on the others; 22
# is the standard length split's, Csordás et al. (EMNLP 2021) use 26.  These are the action
# lengths that occur in SCAN, but 48 (the longest, which would leave no test).  Valid: a seeded
# i.i.d. tenth of the commands within the cutoff, as Csordás et al.'s code holds out.
SCAN_CUTOFFS = (22, 24, 25, 26, 27, 28, 30, 32, 33, 36, 40)
SCAN_CUTOFF_VALID_SHARE = 0.1


@dataclass(frozen=True)
class TaskFacts:
    name: str
    title: str
    description: str
    module: str  # the data module (in fairseq_monoattn.data) that builds it
    builder: str  # the build(seed, data_dir) function of that module
    paper_splits: Tuple[str, ...]  # the splits the paper's tables report, in their order
    # the way the output walks the input: "forward" (left to right), "reversed", or None when
    # no one way does (a direction gate that reads the other way must undo it)
    reading: Optional[str] = None
    # the task's source data is not in the repository: preparing it needs --data-dir
    needs_data_dir: bool = False
    # how the paper summarises seeds: "median" (of 5) or "mean_std" (SCAN: 5 runs, CFQ: 3)
    summary: str = "median"
    # lengths of the training examples (in the task's own unit), where the task has them
    train_lengths: Optional[Tuple[int, int]] = None
    # the digit tasks write extra test splits of any length (prepare --test-lengths)
    any_test_length: bool = False

    @property
    def mean_std(self) -> bool:
        return self.summary == "mean_std"

    @property
    def length_splits(self) -> Tuple[str, ...]:
        """The paper's splits of lengths past training (those a comparison shows)."""
        return tuple(split for split in self.paper_splits if split not in ("test_iid", "test"))

    def load_builder(self):
        """The build(seed, data_dir) function of this task (its module imported now)."""
        from .data.common import DataError

        module_name = f"{__package__}.data.{self.module}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name != module_name:
                raise
            raise DataError(f"{module_name} is not available in this checkout") from None
        return getattr(module, self.builder)


def _digit_task(name, title, description, reading, splits=DIGIT_SPLITS):
    return TaskFacts(
        name,
        title,
        description,
        "digits",
        f"build_{name}",
        splits,
        reading,
        train_lengths=(5, 10),
        any_test_length=True,
    )


def _deletang_task(name, title, description, reading):
    """A task of Delétang et al. (ICLR 2023); its splits are ``deletang_split_plans``."""
    return TaskFacts(
        name,
        title,
        description,
        "chomsky",
        f"build_{name}",
        DELETANG_TEST_SPLITS,
        reading,
        train_lengths=(DELETANG_TASKS[name].shortest, DELETANG_MAX_TRAIN_LENGTH),
        any_test_length=True,
    )


# In the order of the paper's tables, then the tasks of the field beside it.
TASKS: Dict[str, TaskFacts] = {
    task.name: task
    for task in (
        _digit_task("copy", "Copy", "copy the digits", "forward"),
        _digit_task("reverse_copy", "Reverse Copy", "copy the digits in reverse order", "reversed"),
        TaskFacts(
            "lookup",
            "Lookup",
            "compose 3-bit lookup tables left to right",
            "lookup",
            "build_lookup",
            LOOKUP_SPLITS,
            "forward",
        ),
        TaskFacts(
            "reverse_lookup",
            "Reverse Lookup",
            "compose 3-bit lookup tables, mirrored input",
            "lookup",
            "build_reverse_lookup",
            LOOKUP_SPLITS,
            "reversed",
        ),
        _digit_task("recopy", "ReCopy", "write each digit d 1 (d<=3), 3 (d<=6) or 5 times", "forward"),
        _digit_task("reverse_recopy", "Reverse ReCopy", "ReCopy of the reversed digits", "reversed"),
        _digit_task("inv_recopy", "Inv ReCopy", "recover the digits from their ReCopy", "forward"),
        _digit_task(
            "inv_reverse_recopy", "Inv Reverse ReCopy", "recover the digits from their Reverse ReCopy", "reversed"
        ),
        _digit_task("dedupe", "DeDupe", "remove contiguous repetitions", "forward", IID_SPLITS),
        _digit_task(
            "posretrieve",
            "PosRetrieve",
            "for each digit d, output `d : X[d] ;` (the token at position d)",
            None,
            IID_SPLITS,
        ),
        TaskFacts(
            "scan",
            "SCAN (length split)",
            "SCAN length split (commands -> actions)",
            "scan",
            "build_scan",
            ("test",),
            summary="mean_std",
        ),
        TaskFacts(
            "cfq",
            "CFQ (length split)",
            "CFQ length split (questions -> SPARQL)",
            "cfq",
            "build_cfq",
            ("test",),
            needs_data_dir=True,
            summary="mean_std",
        ),
        # the field beside the paper (not in its tables)
        _deletang_task("reverse_string", "Reverse String", "binary string -> the string reversed", "reversed"),
        _deletang_task(
            "stack_manipulation",
            "Stack Manipulation",
            "stack of bits and push/pop actions -> the final stack, top first, then 2",
            None,
        ),
        _deletang_task("duplicate_string", "Duplicate String", "binary string -> the string twice", "forward"),
        _deletang_task("odds_first", "Odds First", "binary string -> tokens at odd positions, then at even", "forward"),
        _deletang_task("bucket_sort", "Bucket Sort", "string over 0..4 -> the string sorted", None),
        _deletang_task("binary_addition", "Binary Addition", "n + m in little-endian binary -> n + m", "forward"),
        *(
            TaskFacts(
                f"scan_cutoff{cutoff}",
                f"SCAN (length cutoff {cutoff})",
                f"SCAN, train on at most {cutoff} actions, test on more",
                "scan",
                f"build_scan_cutoff{cutoff}",
                ("test",),
                summary="mean_std",
            )
            for cutoff in SCAN_CUTOFFS
        ),
    )
}

# The columns of the paper's probing tables (Table 2, its edit distances, Table 5, the appendix).
TABLE2_TASKS = (
    "copy",
    "reverse_copy",
    "lookup",
    "reverse_lookup",
    "recopy",
    "reverse_recopy",
    "inv_recopy",
    "inv_reverse_recopy",
)
# Table 6's two tasks, and every probing task
TABLE6_TASKS = ("dedupe", "posretrieve")
PROBING_TASKS = TABLE2_TASKS + TABLE6_TASKS


class UnknownTask(ValueError):
    """A task name the catalog does not have; the message lists the known ones."""


def task_facts(name: str) -> TaskFacts:
    if name not in TASKS:
        raise UnknownTask(f"unknown task {name!r}; known: {', '.join(TASKS)}")
    return TASKS[name]


def title(task: str) -> str:
    return TASKS[task].title if task in TASKS else task


def table_order(task: str) -> int:
    """Position of a task in the paper's tables (unknown tasks last)."""
    return list(TASKS).index(task) if task in TASKS else len(TASKS)
