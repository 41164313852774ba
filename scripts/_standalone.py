"""attn_only_plugin's files for the scripts that do not import fairseq.

Importing the attn_only_plugin package imports fairseq (its __init__ registers the model), which
takes seconds and which the data, scoring and plotting scripts (spm_prepare, sacrebleu_detok,
bleu_compound_split, evalb, plot_loss, training_flops, shuffle_split, prepare_libreoffice,
compare_quality) do not need. They load the package's fairseq-free files from their paths instead:

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _standalone
    _standalone.one_line_errors()      # guards/errors.py's hook: an unforeseen error is one `error:` line

The files are loaded as submodules of a stand-in package (`_attn_only_standalone`) whose __init__
is not run, so their relative imports (guards/errors.py imports guards/explain.py) work without
fairseq; guards/__init__.py, which does run, imports nothing.
"""

import importlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

STAND_IN = "_attn_only_standalone"


def package_dir() -> Path:
    """attn_only_plugin's folder: beside this script in a checkout, else the installed package
    (find_spec of a top-level package locates it without running its __init__)."""
    here = Path(__file__).resolve().parents[1] / "attn_only_plugin"
    if here.is_dir():
        return here
    spec = importlib.util.find_spec("attn_only_plugin")
    if spec is None:
        sys.exit("error: attn_only_plugin is not installed; run bash scripts/install.sh")
    return Path(spec.submodule_search_locations[0])


def load(relative: str):
    """The package's module at `relative` (e.g. "parsing/evalb.py"), loaded once from its file.
    It must not import fairseq, torch or the package's __init__."""
    if STAND_IN not in sys.modules:
        stand_in = importlib.util.module_from_spec(importlib.machinery.ModuleSpec(STAND_IN, None, is_package=True))
        stand_in.__path__ = [str(package_dir())]
        sys.modules[STAND_IN] = stand_in
    return importlib.import_module(f"{STAND_IN}.{relative.removesuffix('.py').replace('/', '.')}")


def one_line_errors() -> None:
    """guards/errors.py's excepthook (with guards/explain.py): an error that ends the script is one
    `error:` line naming the cause and what to do, or marked unexpected with how to see the traceback
    (ATTN_ONLY_TRACEBACK=1), as in the scripts that import the package."""
    load("guards/errors.py").install_excepthook()
