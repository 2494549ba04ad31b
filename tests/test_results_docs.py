"""The documents that report the paper's tables say what the committed records say: RESULTS.md's
generated part is what fairseq-monoattn-aggregate makes of results/paper today, and every
hand-written count of agreeing cells (README, RESULTS.md's summary, the topic pages) is the count
in that generated part."""

import re
from pathlib import Path

import pytest

from monoattn_lab.aggregate import BEGIN, END, render
from monoattn_lab.records import read_records

REPO_ROOT = Path(__file__).resolve().parents[1]


def generated_part(text: str) -> str:
    start = text.index(BEGIN)
    start = text.index("\n", start) + 1
    return text[start : text.index(END, start)]


@pytest.fixture(scope="module")
def results_text():
    return (REPO_ROOT / "RESULTS.md").read_text()


@pytest.fixture(scope="module")
def counts(results_text):
    """(agreeing cells, cells with a paper value, agreeing cell-lengths, cell-lengths), as generated."""
    found = re.search(
        r"\*\*(\d+) of (\d+) cells \(task, model\) reproduce the paper's verdict at every length\*\* "
        r"\(solved >= 95, failed <= 5, partial otherwise; (\d+) of (\d+) cell-lengths\)",
        generated_part(results_text),
    )
    assert found, "RESULTS.md's generated part has no agreement line"
    return tuple(int(n) for n in found.groups())


def test_generated_tables_are_those_of_the_committed_records(results_text):
    """Re-made from results/paper, the generated part is byte for byte the committed one (the
    length plots it links are taken as they are linked, and must exist)."""
    current = generated_part(results_text)
    plots = re.findall(r"\[length_\w+\]\((docs/figures/length_\w+\.png)\)", current)
    assert plots and all((REPO_ROOT / plot).is_file() for plot in plots)
    records, problems = read_records(REPO_ROOT / "results" / "paper")
    assert not problems
    assert render(records, "default", plots) == current, (
        "RESULTS.md is not what the records give: run "
        "`fairseq-monoattn-aggregate tables --results results/paper --update RESULTS.md --plots docs/figures`"
    )


def words(path: Path) -> str:
    """The file's text with every run of white space (line breaks too) as one space."""
    return " ".join(path.read_text().split())


def test_hand_written_counts_are_the_generated_count(results_text, counts):
    agree, compared, lengths_agree, lengths = counts
    summary = " ".join(results_text[: results_text.index(BEGIN)].split())
    assert (
        f"**{agree} of {compared} cells reproduce the paper's verdict at every length** "
        f"({lengths_agree} of {lengths} cell-lengths)" in summary
    )
    assert f"Each of the {compared - agree} that disagree" in summary
    readme = words(REPO_ROOT / "README.md")
    assert f"**{agree} of the paper's {compared} cells**" in readme
    assert f"Of the other {compared - agree}," in readme
    assert f"verdict ({agree} of {compared})" in words(REPO_ROOT / "docs" / "experiments.md")
    assert f"{agree} of {compared} cells agree." in words(REPO_ROOT / "docs" / "results" / "disagreements.md")


def documented_aggregate_commands():
    """Every fairseq-monoattn-aggregate command line the documents show with arguments (a line
    ending in a backslash continues on the next; placeholders in brackets or "..." left out), as
    (file, argument list)."""
    import shlex

    found = []
    for path in [REPO_ROOT / "README.md", REPO_ROOT / "RESULTS.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]:
        text = path.read_text().replace("\\\n", " ")
        for match in re.finditer(r"fairseq-monoattn-aggregate( [^`\n]*)", text):
            words = match.group(1).strip()
            if words and "[" not in words and "..." not in words:
                found.append((path.relative_to(REPO_ROOT), shlex.split(words, comments=True)))
    return found


def test_every_documented_aggregate_command_parses_as_written():
    from monoattn_lab.cli.aggregate import build_parser

    commands = documented_aggregate_commands()
    views = {argv[0] for _, argv in commands}
    assert {"tables", "variants", "release", "against"} <= views and len(commands) >= 15
    parser = build_parser()
    for path, argv in commands:
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"{path}: fairseq-monoattn-aggregate {' '.join(argv)} does not parse")
