"""EVALB in Python for Section 6.3 of Vaswani et al. (2017): labelled bracketing recall,
precision and F-measure of the TEST trees against the GOLD trees, with evalb.c's argument order,
per-sentence table and summary, and COLLINS.prm's rules unless -p names a parameter file. GOLD
and TEST hold one bracketed tree per line, in the same order.

    attn-only-evalb work/wsj_parsing/text/test.gold work/wsj_parsing/test.pred

Departure from evalb.c: files with different line counts, missing files and
input evalb.c cannot read are a one-line ``error: ...`` and exit status 1
(evalb.c prints a summary for differing line counts).
"""

import argparse
import sys
from dataclasses import replace

from attn_only_tools.guards.errors import PluginError, install_excepthook
from attn_only_tools.parsing import evalb

evalb = evalb  # the package's EVALB, without importing fairseq


def run_evalb(gold, test, param=None, cutoff=None, max_error=None):
    """(report text, per-line error messages) of scoring TEST against GOLD."""
    params = evalb.read_params(param) if param else evalb.COLLINS
    if cutoff is not None:
        params = replace(params, cutoff_len=cutoff)
    if max_error is not None:
        params = replace(params, max_error=max_error)
    gold_lines, test_lines = evalb.read_lines(gold), evalb.read_lines(test)
    if not gold_lines:  # EVALB printed an all-zero report, exit 0, for nothing to score
        raise PluginError(f"{gold} holds no trees: give the gold file, one bracketed tree per line")
    result = evalb.evaluate_lines(gold_lines, test_lines, params)
    errors = [f"{r.line} : {message}" for r in result.sentences for message in r.errors]
    return evalb.format_report(result), errors


def main(argv=None) -> int:
    install_excepthook()  # an error that ends the command is one `error:` line
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="examples:\n" + __doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("gold")
    parser.add_argument("test")
    parser.add_argument("-p", dest="param", help="EVALB parameter file (default: COLLINS.prm)")
    parser.add_argument("-c", dest="cutoff", type=int, help="cut-off length for statistics")
    parser.add_argument("-e", dest="max_error", type=int, help="number of errors to stop at")
    args = parser.parse_args(argv)
    try:
        report, errors = run_evalb(args.gold, args.test, args.param, args.cutoff, args.max_error)
    except (OSError, PluginError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    sys.stdout.write(report)
    for message in errors:
        print(message, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
