"""One-line errors for the plugin's users.

PluginError carries a message that names the problem and what to do. When one ends a fairseq
command-line run (directly, or wrapped by fairseq in another exception), the hook below prints
`error: <message>` on one line and exits with status 1 instead of a traceback wall. A few of
fairseq's own input errors are shown the same way, with what to do added where fairseq does not
say it (_FAIRSEQ_INPUT_ERRORS): "Size of sample #N is invalid ... skip this example with
--skip-invalid-size-inputs-valid-test" (an input longer than the model's positions), a --path
that does not exist, a split that fairseq-preprocess did not write, a checkpoint resumed with
another --optimizer than it was trained with.
Any other exception that ends the run is one line too: those whose message names the cause (no
GPU for --fp16, a sentence longer than --max-tokens, a path the system refused) with what to do
(explain.py); anything else as `error: <Type>: <message>` and "unexpected: rerun with
ATTN_ONLY_TRACEBACK=1 for the traceback and report it". Ctrl-C (KeyboardInterrupt) that ends a run
is one line too (exit status 130), also when cleanup code that ran as it unwound failed in turn and
the run ends with that failure instead; interactive Python sessions keep Python's own handling.
Set ATTN_ONLY_TRACEBACK=1 to see the full traceback.
"""

import os
import sys

from .explain import explain, find_in_chain


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
    "paper_adam): resume with its --optimizer, or keep the weights "
    "and start new moments in a new, empty --save-dir with --restore-file (the checkpoint) --reset-optimizer",
}


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


UNEXPECTED = "unexpected: rerun with ATTN_ONLY_TRACEBACK=1 for the traceback and report it"


def _child_line(exc) -> str:
    """The line for torch.multiprocessing's ProcessRaisedException (a process that fairseq's
    distributed training spawned failed): its message is the child's traceback as text, whose last
    line is `module.Type: message`; the child's exception is read from that line."""
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    name, _, message = (lines[-1] if lines else "").partition(": ")
    name = name.rsplit(".", 1)[-1]
    fix = _fix_for(Exception(message))
    if name == "PluginError" or fix is not None:
        return message + (f": {fix}" if fix else "")
    explained = explain(RuntimeError(message))
    where = f"process {getattr(exc, 'error_index', '?')} of the distributed run"
    return f"{where}: {explained}" if explained else f"{where} failed with {name}: {message[:300]}; {UNEXPECTED}"


def one_line(exc) -> str:
    """The line shown for exc (without `error: `): a PluginError's or known fairseq error's message
    with its fix, else explain.py's reading of the exception, else its type and first line marked
    unexpected. A spawned process's failure is read from the traceback text it carries."""
    if type(exc).__name__ == "ProcessRaisedException":
        return _child_line(exc)
    err, fix = _find_plugin_error(exc)
    if err is not None:
        return f"{err}" + (f": {fix}" if fix else "")
    explained = explain(exc)
    if explained:
        return explained
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"{type(exc).__name__}" + (f": {first}" if first else "") + f"; {UNEXPECTED}"


INTERRUPTED = (
    "interrupted (Ctrl-C): what was being written was not kept, earlier outputs are as they were; run "
    "the same command again (fairseq-train resumes from its last checkpoint)"
)


def _excepthook(exc_type, exc, tb, _previous=sys.excepthook):
    interactive = hasattr(sys, "ps1") or sys.flags.interactive
    # a Ctrl-C can surface as another exception: cleanup code that ran while it unwound (a `finally`
    # or `with` exit in a half-imported library) failed in turn, with the KeyboardInterrupt as context;
    # a PluginError raised for it says what the interruption left (save_dir.py) and is shown instead
    stopped = isinstance(exc, KeyboardInterrupt) or (
        find_in_chain(exc, lambda e: isinstance(e, KeyboardInterrupt)) is not None
        and _find_plugin_error(exc)[0] is None
    )
    if isinstance(exc, BrokenPipeError) and not os.environ.get("ATTN_ONLY_TRACEBACK"):
        os._exit(141)  # the reader of our output went away (`| head`): quiet, 128 + SIGPIPE as a shell reports it
    if os.environ.get("ATTN_ONLY_TRACEBACK") or interactive or not (stopped or isinstance(exc, Exception)):
        return _previous(exc_type, exc, tb)
    try:
        line = INTERRUPTED if stopped else one_line(exc)
    except Exception:  # never hide the error behind a failure to describe it
        return _previous(exc_type, exc, tb)
    try:
        sys.stdout.flush()  # what was printed before the error (log lines, earlier translations)
    except (OSError, ValueError):
        pass
    print(f"error: {line}", file=sys.stderr)
    sys.stderr.flush()
    os._exit(130 if stopped else 1)  # 130 = 128 + SIGINT, as a shell reports a Ctrl-C


def install_excepthook() -> list:
    """Show errors that end a run as one line (sys.excepthook). In fairseq-hydra-train, hydra catches
    every exception of the run and prints it with a traceback (run_and_report) unless
    HYDRA_FULL_ERROR=1, which makes it re-raise: we set that (when the user has not set it) so that
    the exception reaches this hook too. Idempotent. Every command calls it first (the console
    scripts of attn_only_tools.cli and attn_only_plugin.cli, and importing attn_only_plugin); it
    returns what it changed, for the plugin's list of patches (attn_only_plugin/guards/wrap.py)."""
    if sys.excepthook is not _excepthook:
        sys.excepthook = _excepthook
    changed = ["sys.excepthook"]
    if "fairseq_cli.hydra_train" in sys.modules:
        os.environ.setdefault("HYDRA_FULL_ERROR", "1")
        changed.append("os.environ.HYDRA_FULL_ERROR")
    return changed
