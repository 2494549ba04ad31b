"""Run a function once a module has been imported: at once if it is loaded already, otherwise
right after its import completes (a one-shot finder on ``sys.meta_path`` wraps the module's
loader).  Standard library only.

``call_after_import(name, callback, unless_inside=package)`` holds the call back while a module
of ``package`` is being imported: when a module of the package is the one whose import pulls
``name`` in (``fairseq_monoattn.models.gru_seq2seq`` importing fairseq), the callback, which
imports the package's other modules, would meet that module half-initialised (a circular
ImportError).  It then runs as soon as the outermost import of the package's modules finishes."""

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from typing import Callable, List, Optional


class _ThenCall(importlib.abc.Loader):
    """Delegates to the real loader, then calls ``callback``."""

    def __init__(self, loader, callback: Callable[[], None]):
        self.loader = loader
        self.callback = callback

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.callback()

    def __getattr__(self, name):  # get_resource_reader, is_package, ... of the real loader
        return getattr(self.loader, name)


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, callback: Callable[[], None]):
        self.name = name
        self.callback = callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # one shot; find the real spec with the other finders
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenCall(spec.loader, self.callback)
        return spec


class _CountedLoader(importlib.abc.Loader):
    """Delegates to the real loader, counting the package's imports in progress."""

    def __init__(self, loader, watch: "_PackageImports"):
        self.loader = loader
        self.watch = watch

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.watch.depth += 1
        try:
            self.loader.exec_module(module)
        finally:
            self.watch.depth -= 1
        self.watch.run_held()  # after a successful import only: a failed one raises its own error

    def __getattr__(self, name):
        return getattr(self.loader, name)


class _PackageImports(importlib.abc.MetaPathFinder):
    """Counts the imports of ``package``'s submodules in progress; callbacks held while one is runs
    once the count is back to zero.  Removes itself once nothing is held or awaited."""

    def __init__(self, package: str):
        self.package = package
        self.depth = 0
        self.held: List[Callable[[], None]] = []
        self.awaited = 0  # callbacks whose module has not been imported yet

    def find_spec(self, fullname, path, target=None):
        if not fullname.startswith(self.package + ".") or path is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _CountedLoader(spec.loader, self)
        return spec

    def call_or_hold(self, callback: Callable[[], None]) -> None:
        self.awaited -= 1
        if self.depth:
            self.held.append(callback)
        else:
            self.retire()
            callback()

    def run_held(self) -> None:
        if self.depth or not self.held:
            return
        held, self.held = self.held, []
        self.retire()
        for callback in held:
            callback()

    def retire(self) -> None:
        if not self.held and self.awaited <= 0 and self in sys.meta_path:
            sys.meta_path.remove(self)


def _package_imports(package: str) -> "_PackageImports":
    for finder in sys.meta_path:
        if isinstance(finder, _PackageImports) and finder.package == package:
            return finder
    finder = _PackageImports(package)
    sys.meta_path.insert(0, finder)
    return finder


def call_after_import(name: str, callback: Callable[[], None], unless_inside: Optional[str] = None) -> None:
    """``callback()`` now if module ``name`` is imported, else right after it is; with
    ``unless_inside`` (a package), not while a module of that package is being imported."""
    if name in sys.modules:
        callback()
        return
    if any(
        isinstance(finder, _AfterImport) and finder.name == name and getattr(finder, "callback_of", None) is callback
        for finder in sys.meta_path
    ):
        return
    then = callback
    if unless_inside is not None:
        watch = _package_imports(unless_inside)
        watch.awaited += 1
        then = lambda: watch.call_or_hold(callback)  # noqa: E731
    finder = _AfterImport(name, then)
    finder.callback_of = callback
    sys.meta_path.insert(0, finder)
