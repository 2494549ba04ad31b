"""Run a function once a module has been imported: at once if it is loaded already, otherwise
right after its import completes (a one-shot finder on ``sys.meta_path`` wraps the module's
loader).  Standard library only."""

import importlib.abc
import importlib.util
import sys
from typing import Callable


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


def call_after_import(name: str, callback: Callable[[], None]) -> None:
    """``callback()`` now if module ``name`` is imported, else right after it is."""
    if name in sys.modules:
        callback()
    elif not any(
        isinstance(finder, _AfterImport) and finder.name == name and finder.callback is callback
        for finder in sys.meta_path
    ):
        sys.meta_path.insert(0, _AfterImport(name, callback))
