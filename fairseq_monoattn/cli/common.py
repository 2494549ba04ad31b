"""What the plugin's commands share: a parser whose errors are one line (exit status 2) and whose
help shows every default, and the --user-dir option."""

import argparse
import logging
import sys
from pathlib import Path
from typing import List, Optional, Sequence


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in the help of every option; descriptions printed as written."""


class Parser(argparse.ArgumentParser):
    """One-line errors (``prog: error: ...``, exit status 2), every default in ``--help``, no
    abbreviated options."""

    def __init__(self, prog: Optional[str] = None, description: Optional[str] = None, **kwargs):
        # a command builds its parser first: fairseq's INFO chatter (data loading, "install
        # tensorboardX") is not its output (set here, not on import: importing these helpers
        # leaves the process's logging alone)
        logging.getLogger("fairseq").setLevel(logging.WARNING)
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(prog=prog, description=description, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")

    # set by add_variants: --help then lists the model options a variant may give (those of the
    # models that --arch names, when given before --help)
    lists_model_options = False

    def parse_known_args(self, args=None, namespace=None):
        self.archs_given = archs_named(sys.argv[1:] if args is None else list(args))
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        text = super().format_help()
        if self.lists_model_options:
            text += "\n" + model_options_help(getattr(self, "archs_given", []))
        return text


def archs_named(argv: Sequence[str]) -> List[str]:
    """The presets an ``--arch`` of ``argv`` names (``--arch A B`` and ``--arch=A``)."""
    archs, taking = [], False
    for word in map(str, argv):
        if word.startswith("--arch="):
            archs.append(word.split("=", 1)[1])
        taking = word == "--arch" or (taking and not word.startswith("-"))
        if taking and word != "--arch":
            archs.append(word)
    return archs


def model_options_help(archs: Sequence[str]) -> str:
    """The model options of the models ``archs`` are presets of (the GRU's when none is named), as
    fairseq-train reads them, grouped, for the help of a command that passes them in --variant."""
    from ..models.options import BASE_FIELDS, ENTRY_OPTIONS, add_option_arguments, parse_bool
    from ..models.presets import PRESETS
    from ..recipes import option_words

    def options_parser():
        return argparse.ArgumentParser(usage=argparse.SUPPRESS, add_help=False)

    variant = "give them in --variant NAME='--OPTION VALUE ...'; fairseq-train --help does not list them"
    gru = [arch for arch in archs if arch in PRESETS or arch == "gru_seq2seq"]
    others = [arch for arch in archs if arch not in gru]
    sections = []
    if gru or not archs:
        named = f"the presets named: {', '.join(gru)}" if gru else f"{len(PRESETS)} presets: --arch names them"
        helper = options_parser()
        model = helper.add_argument_group(f"model options of gru_seq2seq (the GRU encoder-decoder; {named}): {variant}")
        conventions = helper.add_argument_group(
            "the options of --conventions' group one by one (advanced: the switch sets them all; each one given "
            "overrides it)"
        )
        add_option_arguments(model, parse_bool, only=set(BASE_FIELDS), conventions_group=conventions)
        entries = helper.add_argument_group("the attention entries' settings, each read when its entry is chosen")
        add_option_arguments(entries, parse_bool, only=set(ENTRY_OPTIONS) - set(BASE_FIELDS))
        sections.append(helper.format_help())
        sections += [f"{arch} sets {' '.join(option_words(PRESETS[arch]))}\n" for arch in gru if arch in PRESETS]
    if others:
        from ..models.transformer_monoattn import TRANSFORMER_PRESETS, TransformerMonoAttnModel, model_arguments

        transformer = [arch for arch in others if arch in TRANSFORMER_PRESETS or arch == "transformer_location"]
        if transformer:
            helper = options_parser()
            helper.description = (
                f"model options of transformer_location (fairseq's Transformer with location attention; the "
                f"presets named: {', '.join(transformer)}): fairseq's --arch transformer options, then the location "
                f"attention's; {variant}"
            )
            TransformerMonoAttnModel.add_args(helper)
            sections.append(helper.format_help())
            switches = {name for name, action in model_arguments().items() if action.nargs == 0}
            for arch in transformer:
                if arch in TRANSFORMER_PRESETS:
                    values = TRANSFORMER_PRESETS[arch]
                    words = [f"--{k.replace('_', '-')}" + ("" if k in switches else f" {v}") for k, v in values.items()]
                    sections.append(f"{arch} sets {' '.join(words)}\n")
        sections += [
            f"{arch}: not a preset of the plugin (a --user-dir package's: fairseq-train --user-dir DIR --arch {arch} "
            f"takes the options of its model)\n"
            for arch in others
            if arch not in transformer
        ]
    return "\n".join(sections)


def add_user_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--user-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="a package of your own that registers attention entries or presets (it imports "
        "fairseq_monoattn); passed to fairseq-train as --user-dir",
    )
