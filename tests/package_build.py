"""The Python files and data of the package as setup.py builds them (what an installed plugin and
lab read), built into a temporary folder in seconds: torch is kept out of the build's process, so
setup.py leaves the C++ kernels out."""

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def build_python_package(tmp_path: Path) -> Path:
    """The folder setup.py's build_py wrote the packages into (under ``tmp_path``)."""
    built, eggs = tmp_path / "build", tmp_path / "egg"
    eggs.mkdir()
    build = (
        "import runpy, sys\n"
        "sys.modules['torch'] = None\n"
        f"sys.argv = ['setup.py', '-q', 'egg_info', '--egg-base', {str(eggs)!r}, 'build_py', '--build-lib', "
        f"{str(built)!r}]\n"
        "runpy.run_path('setup.py', run_name='__main__')\n"
    )
    subprocess.run([sys.executable, "-c", build], cwd=REPO_ROOT, check=True, capture_output=True)
    return built
