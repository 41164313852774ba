"""Reads an exception whose message already names its cause into one line with what to do.

errors.py's hook asks explain(exc) for every exception that ends a run and is not a PluginError:
the answer is the line to print (without `error: `), or None when the exception is not one of
these and is shown as unexpected. Only causes the exception itself identifies are here; bad input
that fairseq reports without naming the file or flag is checked where it is read (data_checks.py,
input_checks.py, save_dir.py). find_in_chain, which both use, is here: errors.py imports this
module, never the other way round.
"""

import errno
import os
import re

NO_GPU = (
    "this machine has no usable CUDA GPU: drop --fp16/--bf16/--amp and pass --cpu to fairseq's "
    "commands, or device='cpu' to attn_only_plugin.load"
)

# (pattern of the message, what to say: may use the pattern's groups)
_MESSAGES = [
    (
        r"Torch not compiled with CUDA enabled|Found no NVIDIA driver|No CUDA GPUs are available"
        r"|CUDA driver initialization failed",
        lambda m: NO_GPU,
    ),
    (
        r"Sentences lengths should not exceed max_tokens=(\d+)",
        lambda m: (
            f"a sentence is longer than --max-tokens {m[1]} tokens: raise --max-tokens to at least the longest "
            "sentence (in tokens, </s> included), or leave such sentences out with "
            "--skip-invalid-size-inputs-valid-test"
        ),
    ),
    (
        r"world size is (\d+) but have (\d+) available devices",
        lambda m: (
            f"--distributed-world-size {m[1]} asks fairseq to start {m[1]} processes, one per GPU, and this machine "
            f"has {m[2]}: on CPUs launch one process per rank with torchrun (docs/reliability.md, Distributed "
            "training), or lower --distributed-world-size"
        ),
    ),
    (  # C++ writers (torch.save's zip writer, CTranslate2) report a failed write in their own words
        r"No space left on device|File too large|PytorchStreamWriter failed writing file|file write failed",
        lambda m: (
            f"writing a file failed ({m[0]}): the disk is full or a file-size limit (ulimit -f) was reached; free "
            "space, raise the limit, or write elsewhere; what was being written was not kept"
        ),
    ),
    (
        r"The dataset is empty\. This could indicate that all elements in the dataset have been skipped",
        lambda m: (
            "no batch left to train on: every training sentence was skipped as longer than --max-tokens or the "
            "model's --max-source-positions/--max-target-positions; raise --max-tokens (and the positions) above "
            "the longest sentence"
        ),
    ),
]

# errno -> what to do about a path the system refused
OS_FIXES = {
    errno.ENOSPC: "the disk is full: free space or write elsewhere",
    errno.EFBIG: "the file is larger than this process may write (a file-size limit, see ulimit -f) or the file "
    "system allows: raise the limit, or write elsewhere",
    errno.EDQUOT: "the disk quota is used up: free space or write elsewhere",
    errno.EROFS: "the file system is read-only: write elsewhere",
    errno.EACCES: "no permission: write elsewhere or change the folder's permissions",
    errno.EPERM: "no permission: write elsewhere or change the folder's permissions",
    errno.ENOTDIR: "a part of that path is a file, not a folder: choose another path",
    errno.EEXIST: "a file is in the way of that folder: choose another path",
    errno.EISDIR: "that is a folder, not a file: name a file",
    errno.ENOENT: "check the path",
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


# errnos that say what happened whatever the path: a write that fails on a full disk or past a size
# limit names no file (a write to an open file), and still needs no more to be acted on
_ANY_PATH = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def _os_error(exc):
    """'<path>: <strerror>: <fix>' for an OSError that names its path and an errno we know (or
    'writing failed: <strerror>: <fix>' for a full disk, a size limit, a read-only file system)."""
    fix = OS_FIXES.get(exc.errno)
    if fix is None or not (exc.filename or exc.errno in _ANY_PATH):
        return None
    return f"{exc.filename or 'writing failed'}: {exc.strerror or os.strerror(exc.errno)}: {fix}"


def _config_error(exc):
    """omegaconf's error for a config key that is not a field (a misspelt key in a hydra YAML
    config or override), as one line."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return (
        f"config: {first}: check the key's spelling in the YAML config (--config-dir/--config-name) or "
        "the command-line override"
    )


def _raised_in(exc, function: str) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name == function:
            return True
        tb = tb.tb_next
    return False


def explain(exc):
    """One line for exc (or an exception in its chain), or None."""
    if isinstance(exc, KeyError) and exc.args == (None,) and _raised_in(exc, "parse_args_and_arch"):
        return (
            "no --task given (fairseq-validate has no default task): add --task translation, or the task the "
            "model was trained with"
        )
    found = find_in_chain(
        exc, lambda e: type(e).__name__ == "ConfigKeyError" and type(e).__module__.startswith("omegaconf")
    )
    if found is not None:
        return _config_error(found)
    found = find_in_chain(exc, lambda e: isinstance(e, OSError) and _os_error(e) is not None)
    if found is not None:  # the system's own reading first: it names the path and the errno
        return _os_error(found)
    for pattern, say in _MESSAGES:
        found = find_in_chain(exc, lambda e, pattern=pattern: re.search(pattern, str(e)) is not None)
        if found is not None:
            return say(re.search(pattern, str(found)))
    return None
