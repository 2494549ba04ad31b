"""What the lab's commands share (run, compare, sweep, aggregate, convert): the options every
command names the same way, and the checks made before anything is created.  The parser and
--user-dir are the plugin's own (fairseq_monoattn.cli.common)."""

import argparse
import functools
import io
import shlex
import sys
from contextlib import redirect_stderr
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

from fairseq_monoattn.cli.common import HelpFormatter, Parser, add_user_dir

from ..spec import INTERRUPTED_EXIT

__all__ = ["HelpFormatter", "INTERRUPTED_EXIT", "Parser", "add_user_dir"]  # re-exported for the commands

DEFAULT_SEEDS = (1, 2, 3)
DEFAULT_WORK = Path("work")
DEFAULT_RESULTS = Path("results/paper")
# the CPU budget of the sweeps, and every command's default (the paper: at most 100 epochs)
DEFAULT_MAX_EPOCH = 25
DEFAULT_STOP_AFTER_PERFECT = 3


def interruptible(main):
    """A training command's ``main`` that ends a Ctrl-C arriving outside the runs (the launcher
    reports those itself) with one line and exit status 130 instead of a traceback."""

    @functools.wraps(main)
    def wrapped(argv: Optional[List[str]] = None) -> int:
        try:
            return main(argv)
        except KeyboardInterrupt:
            print("interrupted: finished runs keep their records; the same command resumes", file=sys.stderr)
            return INTERRUPTED_EXIT

    return wrapped


def fail(message: str):
    """Stop the command: ``error: message`` on stderr, exit status 1."""
    raise SystemExit(f"error: {message}")


# --- the shared options -------------------------------------------------------------------------


def whole_number(least: int, why: str = ""):
    """An argparse ``type``: a whole number of at least ``least`` (argparse names the option in
    its one-line error); ``why`` says what a smaller value would do."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}" + (f" ({why})" if why else ""))
        return value

    return parse


SEED = whole_number(0, "a seed is a non-negative number")
POSITIVE = whole_number(1)


def add_arch(parser: argparse.ArgumentParser, required: bool = True, several: bool = True, help: str = "") -> None:
    parser.add_argument(
        "--arch",
        nargs="+" if several else None,
        required=required,
        metavar="ARCH",
        help=help or ("presets (--arch of fairseq-train)" if several else "a preset"),
    )


def add_seeds(
    parser: argparse.ArgumentParser, default: Optional[Sequence[int]] = DEFAULT_SEEDS, help: str = "training seeds"
) -> None:
    parser.add_argument(
        "--seeds", nargs="+", type=SEED, default=list(default) if default else default, metavar="SEED", help=help
    )


def add_budget(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-epoch",
        type=whole_number(1, "fairseq-train reads 0 as no limit: the run would never end"),
        default=DEFAULT_MAX_EPOCH,
        metavar="N",
        help="epoch budget of every run (the paper: 100)",
    )
    parser.add_argument(
        "--stop-after-perfect",
        type=whole_number(0),
        default=DEFAULT_STOP_AFTER_PERFECT,
        metavar="K",
        help="stop a run once greedy valid accuracy has been 100 for K epochs (0: never)",
    )
    parser.add_argument("--data-seed", type=SEED, default=1, metavar="SEED", help="seed of the prepared data")


def add_places(parser: argparse.ArgumentParser, results: Optional[Path] = DEFAULT_RESULTS) -> None:
    """--work and --results; ``results`` None: the default is the sweep's own folder."""
    parser.add_argument(
        "--work", type=Path, default=DEFAULT_WORK, metavar="DIR", help="data, checkpoints and logs (large; not for git)"
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=results if results is not None else argparse.SUPPRESS,  # SUPPRESS: the caller picks it
        metavar="DIR",
        help="one small JSON record per finished run (commit it)"
        + (
            ""
            if results is not None
            else "; default: the sweep's own folder (results/paper for the paper's tables, "
            "results/transformer for the Transformer sweeps, WORK/smoke-results for smoke)"
        ),
    )


def niceness(text: str) -> int:
    """A nice value a process may take for itself: 0 (as started) to 19 (gives way to all other work)."""
    value = whole_number(0)(text)
    if value > 19:
        raise argparse.ArgumentTypeError(f"must be at most 19 (the lowest priority), got {value}")
    return value


def add_jobs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--jobs", type=POSITIVE, default=1, metavar="N", help="runs at once, each pinned to its share of the cores"
    )
    parser.add_argument(
        "--nice",
        type=niceness,
        default=0,
        metavar="N",
        help="run each training at nice N (0-19; its session's share of the machine too, where Linux shares it "
        "between sessions first), so that the runs give way to other work on the machine",
    )


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """What every command that trains takes: seeds, budget, folders, jobs, a user's package."""
    add_seeds(parser)
    add_budget(parser)
    add_places(parser)
    add_jobs(parser)
    add_user_dir(parser)


def add_variants(parser: argparse.ArgumentParser, several: bool) -> None:
    parser.lists_model_options = True  # --help lists the model options a variant may give
    help_text = (
        "a named set of extra fairseq-train options, NAME=OPTIONS (OPTIONS may be empty: the presets "
        "as they are); records go to RESULTS/TASK/ARCH/NAME/"
    )
    if several:
        parser.add_argument(
            "--variant", action="append", required=True, metavar="NAME=OPTIONS", help=help_text + "; give two or more"
        )
    else:
        parser.add_argument(
            "--variant",
            default=None,
            action=OnlyOnce,
            metavar="NAME=OPTIONS",
            help=help_text + " (default: default=, the presets as they are); one per command",
        )


class OnlyOnce(argparse.Action):
    """An option that may be given once: a second one is a usage error, not a silent override."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest) is not None:
            parser.error(
                f"{option_string} given twice ({getattr(namespace, self.dest)!r}, then {values!r}); this command "
                f"runs one, so give each its own command"
            )
        setattr(namespace, self.dest, values)


def parse_variant(text: str) -> Tuple[str, Tuple[str, ...]]:
    """'NAME=--opt value --opt2 value' -> (NAME, options)."""
    name, sep, options = text.partition("=")
    name = name.strip()
    if not sep or not name or "/" in name:
        raise ValueError(f"--variant takes NAME=OPTIONS (a name without '/'), got {text!r}")
    try:
        return name, tuple(shlex.split(options))
    except ValueError as error:
        raise ValueError(f"--variant {name}: cannot split its options: {error}") from None


# --- checks before anything is created ------------------------------------------------------------


def check_tasks(parser: argparse.ArgumentParser, tasks: Iterable[str], option: str = "task") -> None:
    from fairseq_monoattn.catalog import TASKS

    unknown = [task for task in tasks if task not in TASKS]
    if unknown:
        where = f"{option}: " if option.startswith("--") else ""
        parser.error(f"{where}unknown task {', '.join(map(repr, unknown))}; known: {', '.join(TASKS)}")


def import_user_dir(user_dir: Optional[Path]) -> None:
    """Register the plugin with fairseq, and a user's package (as fairseq-train's --user-dir)."""
    from argparse import Namespace

    from fairseq import utils

    import fairseq_monoattn

    fairseq_monoattn.register()
    if user_dir is not None:
        utils.import_user_module(Namespace(user_dir=str(user_dir)))


def check_user_dir(parser: argparse.ArgumentParser, user_dir: Optional[Path]) -> None:
    if user_dir is None:
        return
    if not (Path(user_dir) / "__init__.py").is_file():
        parser.error(f"--user-dir {user_dir}: not a Python package (no __init__.py)")
    try:
        import_user_dir(user_dir)
    except Exception as error:  # a user's package: any failure is theirs to see
        parser.error(f"--user-dir {user_dir}: cannot import it: {type(error).__name__}: {error}")


def check_archs(parser: argparse.ArgumentParser, archs: Iterable[str], user_dir: Optional[Path] = None) -> None:
    """Every name must be a registered architecture (the plugin's, or the user package's)."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    import_user_dir(user_dir)
    unknown = [arch for arch in archs if arch not in ARCH_MODEL_REGISTRY]
    if unknown:
        mine = sorted(
            name
            for name, model in ARCH_MODEL_REGISTRY.items()
            if getattr(model, "__module__", "").startswith("fairseq_monoattn")
        )
        parser.error(f"--arch: unknown architecture {', '.join(map(repr, unknown))}; this plugin's: {', '.join(mine)}")


def check_train_options(
    parser: argparse.ArgumentParser, arch: str, name: str, options: Sequence[str], recipe: str = "paper"
) -> None:
    """A variant's options must parse as fairseq-train options of ``arch`` after the recipe's (an
    unknown option, a value of the wrong type or out of range is named here, not after data
    preparation)."""
    from fairseq import options as fairseq_options

    from fairseq_monoattn.models.options import OptionError, check_options, explicit_options
    from fairseq_monoattn.recipes import recipe_options
    from fairseq_monoattn.registry import SettingsError

    stderr = io.StringIO()
    try:
        with redirect_stderr(stderr):
            fairseq_options.parse_args_and_arch(
                fairseq_options.get_training_parser(),
                input_args=["DATA", "--arch", arch, *recipe_options(recipe), *options],
            )
    except SystemExit:
        lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
        reason = lines[-1].split("error: ", 1)[-1] if lines else "fairseq-train refuses them"
        parser.error(f"--variant {name}: {reason}")
    try:
        check_options(explicit_options(options))
    except (OptionError, SettingsError) as error:
        parser.error(f"--variant {name}: {error}")


def variants_from(parser: argparse.ArgumentParser, texts: Optional[List[str]]) -> dict:
    """{name: options} of ``--variant`` texts, names unique."""
    variants = {}
    for text in texts or ():
        try:
            name, options = parse_variant(text)
        except ValueError as error:
            parser.error(str(error))
        if name in variants:
            parser.error(f"--variant {name}: given twice")
        variants[name] = options
    return variants


def check_run_inputs(
    parser: argparse.ArgumentParser, task: str, archs: Sequence[str], variants: dict, user_dir: Optional[Path]
) -> None:
    """Everything a training command is given, checked before anything is created: the task, the
    user's package, the presets, and every variant's options for every preset."""
    check_tasks(parser, [task])
    check_user_dir(parser, user_dir)
    check_archs(parser, archs, user_dir)
    for arch in archs:
        for name, options in variants.items():
            check_train_options(parser, arch, name, options)
