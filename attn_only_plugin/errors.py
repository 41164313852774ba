"""One-line errors for the plugin's users.

PluginError carries a message that names the problem and what to do. When one ends a fairseq
command-line run (directly, or wrapped by fairseq in another exception), the hook below prints
`error: <message>` on one line and exits with status 1 instead of a traceback wall. A few of
fairseq's own input errors are shown the same way, with what to do added where fairseq does not
say it (_FAIRSEQ_INPUT_ERRORS): "Size of sample #N is invalid ... skip this example with
--skip-invalid-size-inputs-valid-test" (an input longer than the model's positions), a --path
that does not exist, a split that fairseq-preprocess did not write, a checkpoint resumed with
another --optimizer than it was trained with.
Set ATTN_ONLY_TRACEBACK=1 to see the full traceback.
"""
import os
import sys


class PluginError(ValueError):
    """A user-facing error: bad configuration, bad input or an incompatible checkpoint."""


# fairseq's own messages for input errors (how they start), each with what to do about it
# ("" where fairseq's message already says): shown as one line too.
_FAIRSEQ_INPUT_ERRORS = {
    "Size of sample #": "",
    "Must specify batch size either with --max-tokens or --batch-size": "",
    "Model file not found: ": "give --path a checkpoint that exists (fairseq-train writes checkpoint_best.pt "
                              "and checkpoint_last.pt into --save-dir)",
    "Dataset not found: ": "fairseq-preprocess wrote no such split into that folder; give it --trainpref/--validpref/"
                           "--testpref, or choose an existing split with --valid-subset / --gen-subset",
    "Optimizer does not match; ": "the checkpoint's Adam moments are another optimizer's (the recipes use "
                                  "paper_adam since 2026-11-24): resume with its --optimizer, or keep the weights "
                                  "and start new moments with --reset-optimizer",
}


def find_in_chain(exc, matches):
    """The first exception in exc's chain (exc, its __cause__ or __context__, theirs, ...) for
    which matches(e) is true, or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if matches(exc):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _fix_for(exc):
    """What to do about exc: "" for a PluginError (its message says), the fix for a known fairseq
    input error, None for anything else."""
    if isinstance(exc, PluginError):
        return ""
    return next((fix for start, fix in _FAIRSEQ_INPUT_ERRORS.items() if str(exc).startswith(start)), None)


def _find_plugin_error(exc):
    """(the PluginError or known fairseq error in exc's chain, the fix to add), or (None, "")."""
    found = find_in_chain(exc, lambda e: _fix_for(e) is not None)
    return (found, _fix_for(found)) if found is not None else (None, "")


def _excepthook(exc_type, exc, tb, _previous=sys.excepthook):
    err, fix = _find_plugin_error(exc)
    if err is None or os.environ.get("ATTN_ONLY_TRACEBACK"):
        return _previous(exc_type, exc, tb)
    try:
        sys.stdout.flush()  # what was printed before the error (log lines, earlier translations)
    except (OSError, ValueError):
        pass
    print(f"error: {err}" + (f": {fix}" if fix else ""), file=sys.stderr)
    sys.stderr.flush()
    os._exit(1)


def install_excepthook():
    if getattr(sys.excepthook, "__name__", "") != "_excepthook":
        sys.excepthook = _excepthook
