"""Records kept in git: each finished run's record committed on its own, so that no finished
run is lost when a machine goes away, and the records no sweep committed found again."""

import subprocess
from pathlib import Path
from typing import Callable, List, Optional, Sequence

from .spec import RunSpec


def git_toplevel(folder: Path) -> Optional[Path]:
    """The top folder of the git work tree holding ``folder``, or None outside git."""
    top = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    return Path(top.stdout.strip()) if top.returncode == 0 else None


def commit_record(spec: RunSpec, record_path: Path, log: Callable[[str], None] = print) -> None:
    """git-commit one finished run's record (only that file); a failure to commit is reported,
    never fatal."""
    record_path = Path(record_path).resolve()
    top = git_toplevel(record_path.parent)
    if top is None:
        log(f"note: {record_path} is not in a git repository; not committed")
        return
    message = f"results: {spec.key} ({spec.max_epoch} epochs max)"
    for command in (
        ["git", "-C", str(top), "add", "--", str(record_path)],
        ["git", "-C", str(top), "commit", "-q", "-m", message, "--", str(record_path)],
    ):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            log(f"note: could not commit {record_path}: {done.stderr.strip()}")
            return


def uncommitted_records(specs: Sequence[RunSpec], results: Path) -> List[RunSpec]:
    """The specs whose record exists but git does not have as it is (untracked or changed): runs
    that finished after their sweep was stopped, so nobody committed them.  Empty outside git."""
    results = Path(results).resolve()
    root = git_toplevel(results) if results.is_dir() else None
    if root is None:
        return []
    listed = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all", "-z", "--", str(results)],
        capture_output=True,
        text=True,
    ).stdout
    pending = {(root / entry[3:]).resolve() for entry in listed.split("\0") if entry}
    return [spec for spec in specs if spec.record_path(results).resolve() in pending]
