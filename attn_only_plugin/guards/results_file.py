"""fairseq-generate --results-path DIR writes DIR/generate-<subset>.txt whole or not at all.

fairseq opens that file at the start and prints into it as it translates, so a run stopped by
Ctrl-C (or by an error mid-way) left a file that ends without the score line but otherwise looks
like a finished translation of the set. Installed by fairseq_fixes.install() when fairseq-generate
runs, the wrapper below lets fairseq write into the folder DIR/generate-<subset>.txt.incomplete/
instead and moves the file to DIR/generate-<subset>.txt only when generation has finished (fsync,
then os.replace over an earlier file). When it stops early, the incomplete folder is removed and an
earlier generate-<subset>.txt is left as it was; after a SIGKILL, which nothing can catch, the
partial file is left under the name that says it is incomplete. Ctrl-C ends in one line,
`error: interrupted: ...` (with or without --results-path), instead of a KeyboardInterrupt traceback.
"""

import functools
import os
import shutil
from argparse import Namespace

from attn_only_tools.guards.errors import PluginError

INCOMPLETE = ".incomplete"


def _interrupted(subset: str, what: str) -> PluginError:
    return PluginError(
        f"interrupted: fairseq-generate stopped before the end of '{subset}', so {what}: run it again "
        f"to translate the whole set"
    )


def _publish(partial_dir: str, name: str, final: str) -> None:
    """Move partial_dir/name, complete now, to final, durably, and remove partial_dir."""
    done = os.path.join(partial_dir, name)
    with open(done, "rb") as f:
        os.fsync(f.fileno())
    os.replace(done, final)
    shutil.rmtree(partial_dir, ignore_errors=True)


def generate_to_results(main, cfg):
    """Run fairseq_cli.generate.main(cfg) with --results-path DIR, writing generate-<subset>.txt
    only once generation has finished."""
    folder, subset = cfg.common_eval.results_path, cfg.dataset.gen_subset
    name = f"generate-{subset}.txt"
    final = os.path.join(folder, name)
    partial_dir = final + INCOMPLETE
    if os.path.isdir(final) or os.path.exists(folder) and not os.path.isdir(folder):
        # found only after translating everything, where the move over it failed
        what = f"{final} is a folder" if os.path.isdir(final) else f"--results-path {folder} is a file"
        raise PluginError(
            f"{what}, so the results cannot be written there: move it away, or give another --results-path"
        )
    cfg.common_eval.results_path = partial_dir  # fairseq writes partial_dir/generate-<subset>.txt
    try:
        result = main(cfg)
    except BaseException as e:
        shutil.rmtree(partial_dir, ignore_errors=True)
        if isinstance(e, KeyboardInterrupt):
            earlier = " (the earlier one is left as it was)" if os.path.exists(final) else ""
            raise _interrupted(subset, f"{final} was not written{earlier}") from e
        raise
    finally:
        cfg.common_eval.results_path = folder
    _publish(partial_dir, name, final)
    return result


def whole_results(main):
    """Wrap fairseq_cli.generate.main: results written whole or not at all, Ctrl-C as one line."""

    @functools.wraps(main)
    def wrapper(cfg):
        if isinstance(cfg, Namespace):
            from fairseq.dataclass.utils import convert_namespace_to_omegaconf

            cfg = convert_namespace_to_omegaconf(cfg)
        if cfg.common_eval.results_path is not None:
            return generate_to_results(main, cfg)
        try:
            return main(cfg)
        except KeyboardInterrupt as e:
            raise _interrupted(cfg.dataset.gen_subset, "the output printed so far is incomplete") from e

    return wrapper
