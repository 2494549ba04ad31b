"""mkdocs hook: the site's home page is the repository's README.md and RESULTS.md is a page of
it, so that every link of both (and of the pages in docs/) is checked when the site is built.

Links are written for reading the files where they lie (on a forge, in an editor): README.md and
RESULTS.md link to ``docs/X.md``, the pages in docs/ to ``../RESULTS.md``.  The hook rewrites them
to the site's layout, nothing else."""

import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"README.md": "index.md", "RESULTS.md": "RESULTS.md"}
LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def on_files(files, config):
    for name, uri in PAGES.items():
        files.append(File.generated(config, uri, abs_src_path=str(ROOT / name)))
    return files


def _at_root(target: str) -> str:
    """A link from README.md or RESULTS.md, as the site sees it."""
    if target.startswith("docs/"):
        return target[len("docs/") :]
    if target.split("#")[0] == "README.md":
        return "index.md" + target[len("README.md") :]
    return target


def _in_docs(target: str, depth: int) -> str:
    """A link from a page under docs/ (``depth`` folders down) to README.md or RESULTS.md."""
    up = "../" * (depth + 1)
    for name, uri in PAGES.items():
        if target.startswith(up + name):
            return "../" * depth + uri + target[len(up + name) :]
    return target


def on_page_markdown(markdown, page, config, files):
    uri = page.file.src_uri
    if uri in PAGES.values():
        rewrite = _at_root
    else:
        depth = uri.count("/")
        rewrite = lambda target: _in_docs(target, depth)  # noqa: E731
    return LINK.sub(lambda m: m.group(1) + rewrite(m.group(2)) + m.group(3), markdown)
