"""Atomic file output: a file we write is, at every moment, either its old content or the complete
new one, never a half-written file (a killed checkpoint write, Ctrl-C during averaging).

Used by the checkpoint writes patched into fairseq (attn_only_plugin/fairseq_fixes.py) and by every
command that writes: averaged and converted checkpoints, prepared treebanks and corpora, figures.

check_output: the one rule for every command that writes (scripts, exports): an output may not
be, contain, or lie inside any of its inputs, and an existing output is replaced only with --force.
same_file / input_written_over compare two paths as files, not names.
"""

import contextlib
import os
import tempfile

from .errors import PluginError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_output(path, mode: str = "wb", tmp_path=None, **open_kwargs):
    """Yield a file open on a temporary file in PATH's folder; when the block ends, flush and fsync
    it and os.replace it over PATH (permissions 0o666 & ~umask, as open() gives). If the block
    raises, the temporary file is removed and PATH is left as it was.

    tmp_path: a fixed temporary name, so that a file left by a killed process is overwritten by the
    next write instead of piling up; default a fresh hidden `.NAME.XXXX.tmp` beside PATH."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):  # else the error would name the hidden temporary file, found only at the end
        raise PluginError(f"{path} is a folder: give a file path to write")
    if not os.path.isdir(folder):
        raise PluginError(f"the folder of {path} does not exist: create it first, or choose another path")
    if tmp_path is None:
        fd, tmp = tempfile.mkstemp(
            dir=os.path.dirname(os.path.abspath(path)), prefix=f".{os.path.basename(path)}.", suffix=".tmp"
        )
        f = os.fdopen(fd, mode, **open_kwargs)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600
    else:
        tmp = os.fspath(tmp_path)
        f = open(tmp, mode, **open_kwargs)
    try:
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def same_file(a, b) -> bool:
    """True when paths a and b are one file: the same path written differently (relative or
    absolute, through a symlink) or two hard links to it; False when either does not exist."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def input_written_over(output, inputs):
    """The first of `inputs` that is the same file as `output` (see same_file), or None."""
    return next((i for i in inputs if same_file(output, i)), None)


def _inside(path: str, folder: str) -> bool:
    """True when real path `path` lies strictly inside real path `folder`."""
    return os.path.commonpath([path, folder]) == folder and path != folder


def empty_folder(path) -> bool:
    """True when path is a folder with nothing in it (an output there replaces nothing)."""
    try:
        return os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path)
    except OSError:
        return False


def check_output(output, inputs, force: bool = False, flag: str = "--out") -> None:
    """Refuse, in one line (PluginError), an OUTPUT that would destroy or mix with an input, before
    anything is read or written: OUTPUT is one of INPUTS (the same file however named: relative,
    through a symlink, a hard link), contains one (replacing the folder would delete it), or lies
    inside one (writing it would change the input); or OUTPUT exists and force is False. Inputs
    that do not exist are skipped (their own checks name them). Paths are compared after
    resolving symlinks, so a link is no way round the rule. An empty folder is no existing output:
    there is nothing in it to replace (a user's `mkdir` before the command, pytest's tmp_path)."""
    out = os.path.realpath(os.fspath(output))
    for given in inputs:
        if given is None or not os.path.exists(given):
            continue
        inp = os.path.realpath(os.fspath(given))
        if out == inp or same_file(out, inp):
            problem = "is the input"
        elif _inside(inp, out):
            problem = "holds the input"
        elif _inside(out, inp):
            problem = "lies inside the input"
        else:
            continue
        raise PluginError(
            f"{flag} {output} {problem} {given}: writing it would destroy or change that input, "
            f"--force or not; give {flag} a path outside every input"
        )
    if os.path.lexists(output) and not force and not empty_folder(output):
        raise PluginError(f"{flag} {output} already exists: pass --force to replace it, or choose another {flag}")


def check_writable(path, flag: str = "--out", create_folders: bool = False) -> None:
    """Refuse, before any work, a file path that cannot be written: a folder; a path through a file;
    a folder that does not exist (unless the command creates it, create_folders); a folder this user
    cannot write. Written at the end, such a path failed only after all the work was done."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise PluginError(f"{flag} {path} is a folder: give a file path to write")
    folder = os.path.dirname(os.path.abspath(path))
    existing = folder
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise PluginError(f"{flag} {path} cannot be written: {existing} is a file, not a folder; choose another path")
    if existing != folder and not create_folders:
        raise PluginError(f"the folder of {path} does not exist: create it first, or choose another {flag}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PluginError(f"{flag} {path} cannot be written: this user may not write into {existing}")
