"""What the plugin's commands share: a parser whose errors are one line (exit status 2) and whose
help shows every default, and the --user-dir option."""

import argparse
import logging
from pathlib import Path
from typing import Optional

# fairseq's INFO chatter (data loading, "install tensorboardX") is not the commands' output
logging.getLogger("fairseq").setLevel(logging.WARNING)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in the help of every option; descriptions printed as written."""


class Parser(argparse.ArgumentParser):
    """One-line errors (``prog: error: ...``, exit status 2), every default in ``--help``, no
    abbreviated options."""

    def __init__(self, prog: Optional[str] = None, description: Optional[str] = None, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(prog=prog, description=description, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def add_user_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--user-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="a package of your own that registers attention entries or presets (it imports "
        "fairseq_monoattn); passed to fairseq-train as --user-dir",
    )
