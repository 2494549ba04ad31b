"""The plugin's errors whose message says everything a user needs (the file or option, and what is
wrong with it).  Raised inside fairseq's own commands (fairseq-train, fairseq-generate) once the
plugin's task is set up or one of its models is built (both install :func:`install_excepthook`:
a process that uses neither keeps Python's own hook), they are printed as one line,
``error: <message>``, with exit status 1, not as a traceback; set FAIRSEQ_MONOATTN_TRACEBACK=1 to
see the traceback.  Under fairseq-hydra-train hydra prints the message, after its own line naming
the overrides (HYDRA_FULL_ERROR=1 for the traceback)."""

import os
import sys

# hydra (fairseq-hydra-train runs training inside it) prints every exception as a traceback, before
# any excepthook sees it, but its CompactHydraException, whose message it prints alone.  Where hydra
# is loaded when the plugin is (fairseq's commands import it before the plugin's --user-dir), the
# plugin's errors are such exceptions; elsewhere (the data commands) hydra is not imported for it.
_BASE = getattr(sys.modules.get("hydra.errors"), "CompactHydraException", Exception)


class PluginError(_BASE):
    """An error whose message names the file or option and says what is wrong."""


def plugin_error_behind(error: BaseException):
    """``error`` if it is a PluginError, else the PluginError it was raised while handling (fairseq's
    trainer turns any failure to load a checkpoint's weights into a plain "Cannot load model
    parameters"), else None."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, PluginError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def install_excepthook() -> None:
    """Print uncaught PluginErrors as one line (idempotent)."""
    previous = sys.excepthook
    if getattr(previous, "prints_plugin_errors", False):
        return

    def hook(kind, value, traceback):
        error = plugin_error_behind(value)
        if error is not None and not os.environ.get("FAIRSEQ_MONOATTN_TRACEBACK"):
            print(f"error: {error}", file=sys.stderr)
            return
        previous(kind, value, traceback)

    hook.prints_plugin_errors = True
    sys.excepthook = hook
