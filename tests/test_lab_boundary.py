"""The experiment lab (monoattn_lab) sits beside the plugin, never under it: the lab imports the
plugin, and no module of the plugin imports the lab, neither when it is imported nor later."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "fairseq_monoattn"
LAB = "monoattn_lab"


def plugin_modules():
    """Every module of the plugin package, by name, from its files."""
    names = []
    for path in sorted(PLUGIN.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


# In a fresh process started in the repository root (where the lab is importable): import every
# module of the plugin, then list the lab's modules that came with them.
IMPORT_ALL = r"""
import importlib, importlib.util, json, sys
names = json.loads(sys.argv[1])
lab_importable = importlib.util.find_spec("monoattn_lab") is not None
for name in names:
    importlib.import_module(name)
imported = [name for name in names if name in sys.modules]
lab = sorted(name for name in sys.modules if name == "monoattn_lab" or name.startswith("monoattn_lab."))
print(json.dumps({"lab_importable": lab_importable, "imported": imported, "lab": lab}))
"""


def test_importing_every_module_of_the_plugin_imports_nothing_of_the_lab():
    names = plugin_modules()
    assert {"fairseq_monoattn", "fairseq_monoattn.scoring", "fairseq_monoattn.cli.score"} <= set(names)
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, json.dumps(names)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["lab_importable"], "the check means nothing where the lab cannot be imported"
    assert found["imported"] == names
    assert found["lab"] == [], f"importing the plugin imported the lab: {found['lab']}"


def lab_imports(path: Path):
    """(line, what) of every import of the lab in a Python file: import statements anywhere (a
    function's too), and importlib.import_module / __import__ calls with a literal name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.level == 0 else []
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            function = node.func
            called = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
            names = [node.args[0].value] if called in ("import_module", "__import__") else []
        else:
            continue
        found += [(node.lineno, name) for name in names if isinstance(name, str) and name.split(".")[0] == LAB]
    return sorted(found)


def test_no_file_of_the_plugin_imports_the_lab():
    files = sorted(PLUGIN.rglob("*.py"))
    assert len(files) > 40  # the whole package, not an empty folder
    offending = [f"{path.relative_to(ROOT)}:{line}: {name}" for path in files for line, name in lab_imports(path)]
    assert offending == [], "\n".join(offending)


def test_the_scan_finds_each_way_of_importing_the_lab(tmp_path):
    source = tmp_path / "module.py"
    source.write_text(
        "import os\nfrom fairseq_monoattn import files\n"
        "def later():\n    from monoattn_lab.runs import RunSpec\n"
        "import monoattn_lab\nimportlib.import_module('monoattn_lab.sweeps')\n"
        "from . import monoattn_lab_notes\nimport monoattn_labs\n"
    )
    assert lab_imports(source) == [(4, "monoattn_lab.runs"), (5, "monoattn_lab"), (6, "monoattn_lab.sweeps")]
