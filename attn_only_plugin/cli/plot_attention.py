"""Attention figures like Figures 3-5 of Vaswani et al. (2017) (appendix: encoder self-attention
of layer 5 of 6), for any trained checkpoint.

    attn-only-plot-attention --checkpoint-dir work/quickstart/checkpoints \\
        --checkpoint-file checkpoint_avg.pt --data work/quickstart/data-bin \\
        --spm-model work/quickstart/spm/spm.model --source "Click OK to close the dialog." \\
        --word close --heads 0,1 --out work/attention

Writes, as PNG and SVG: (a) `lines_<word>`: Figure 3, lines from one word to the words it
attends to in a chosen layer, one colour per head; (b) `heads`: Figure 4, the full attention
of the chosen heads, and the isolated attention of one word in those heads; (c) `grid_encoder`,
`grid_decoder`, `grid_cross`: heatmaps of all heads of the layer for encoder self-attention,
decoder self-attention and encoder-decoder attention. `attention.json` holds every weight:
{"encoder"|"decoder"|"cross": [layer][head][query][key]} with the token labels.
Tokens are sentencepiece pieces: a piece that continues a word is shown with a leading "·".
Without --target the model's own beam-search output is used.
"""

import json
import sys
from pathlib import Path

from attn_only_tools.cli import command_parser
from attn_only_tools.guards.errors import PluginError


def labels(pieces):
    """'▁Click' -> 'Click', 'ing' -> '·ing' (continuation of a word), '</s>' kept."""
    return [p[1:] if p.startswith("▁") else p if p.startswith("<") else "·" + p for p in pieces]


def find_word(tokens, word: str) -> int:
    if word.lstrip("-").isdigit():
        index = int(word)
        if not 0 <= index < len(tokens):
            raise PluginError(f"--word {index} is out of range: the source has {len(tokens)} tokens")
        return index
    for i, t in enumerate(tokens):
        if t.lstrip("·").lower() == word.lower():
            return i
    raise PluginError(f"--word {word!r} is not a source token; the tokens are: {' '.join(tokens)}")


def _lines(ax, weights, tokens, rows, heads, colors, title):
    """Figures 3/4: tokens in two columns, a line from row token i to column token j per head,
    opacity = weight."""
    n = len(tokens)
    for y, tok in enumerate(tokens):
        ax.text(0, n - y, tok, ha="right", va="center", fontsize=9)
        ax.text(1, n - y, tok, ha="left", va="center", fontsize=9)
    for h, color in zip(heads, colors, strict=True):
        for i in rows:
            for j in range(n):
                alpha = float(weights[h, i, j])
                if alpha > 0.02:
                    ax.plot([0.03, 0.97], [n - i, n - j], color=color, alpha=min(1.0, alpha), lw=2)
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylim(0, n + 1)
    ax.axis("off")
    ax.set_title(title, fontsize=10)


def _grid(weights, rows, cols, title):
    import matplotlib.pyplot as plt

    h = weights.shape[0]
    ncol = min(4, h)
    nrow = (h + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.2 * ncol, 3.6 * nrow), squeeze=False)
    for k, ax in enumerate(axes.flat):
        if k >= h:
            ax.axis("off")
            continue
        ax.imshow(weights[k].numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
        ax.set_title(f"head {k}", fontsize=9)
        ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=6)
        ax.set_yticks(range(len(rows)), rows, fontsize=6)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _save(fig, out: Path, name: str, written: list):
    from attn_only_tools.guards.atomic import atomic_output

    for ext in ("png", "svg"):
        path = out / f"{name}.{ext}"
        with atomic_output(path) as f:
            fig.savefig(f, format=ext, dpi=110)
        written.append(path)


def render(att: dict, out: Path, layer, word: str, heads):
    """Write the figures and attention.json for the weights returned by Translator.attention;
    layer None is the second to last (the paper shows layer 5 of 6)."""
    import logging

    import matplotlib

    from attn_only_tools.guards.atomic import atomic_output

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq's logging config is verbose
    n_layers, n_heads = att["encoder"].shape[:2]
    default = max(n_layers - 2, 0)
    if layer is None:
        layer = default
    elif not 0 <= layer < n_layers:
        raise PluginError(
            f"--layer {layer} is out of range: the model has {n_layers} encoder layers, numbered "
            f"0-{n_layers - 1} (leave --layer out for {default}, the second to last)"
        )
    bad = [h for h in heads if not 0 <= h < n_heads]
    if bad:
        raise PluginError(f"head {bad[0]} is out of range: the model has {n_heads} heads")
    src, tgt = labels(att["source_tokens"]), labels(att["target_tokens"])
    tgt_in = ["</s>"] + tgt[:-1]
    out.mkdir(parents=True, exist_ok=True)
    enc = att["encoder"][layer]  # (h, S, S)
    colors = plt.get_cmap("tab10" if n_heads <= 10 else "tab20")(range(n_heads))
    i = find_word(src, word) if word else 0
    written = []
    fig, ax = plt.subplots(figsize=(5, 0.35 * len(src) + 1.5))
    _lines(
        ax,
        enc,
        src,
        [i],
        range(n_heads),
        colors,
        f"encoder self-attention, layer {layer + 1} of {n_layers}: '{src[i]}', one colour per head",
    )
    _save(fig, out, f"lines_{i}", written)
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.35 * len(src) + 1.5))
    _lines(
        axes[0],
        enc,
        src,
        range(len(src)),
        heads,
        colors[: len(heads)],
        f"heads {', '.join(map(str, heads))}: full attention",
    )
    _lines(axes[1], enc, src, [i], heads, colors[: len(heads)], f"isolated attention from '{src[i]}'")
    _save(fig, out, "heads", written)
    for kind, rows, cols in (("encoder", src, src), ("decoder", tgt_in, tgt_in), ("cross", tgt_in, src)):
        _save(
            _grid(att[kind][layer], rows, cols, f"{kind} attention, layer {layer + 1}, all heads"),
            out,
            f"grid_{kind}",
            written,
        )
    plt.close("all")
    data = {k: att[k].tolist() for k in ("encoder", "decoder", "cross")}
    data.update(
        source_tokens=att["source_tokens"],
        target_tokens=att["target_tokens"],
        layout="[layer][head][query][key]; decoder queries are </s> + target[:-1]",
    )
    with atomic_output(out / "attention.json", "w", encoding="utf-8") as f:
        f.write(json.dumps(data))
    written.append(out / "attention.json")
    return written


def main(argv=None) -> None:
    p = command_parser(__doc__)
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--checkpoint-file", default="checkpoint_last.pt")
    p.add_argument("--data", help="fairseq data-bin with the dictionaries (default: the checkpoint dir)")
    p.add_argument("--spm-model", help="sentencepiece model used to prepare the data")
    p.add_argument("--source", required=True, help="the source sentence, as plain text")
    p.add_argument("--target", help="a target sentence (default: the model's beam-search output)")
    p.add_argument("--layer", type=int, help="encoder layer from 0 (default: second to last)")
    p.add_argument("--word", default="", help="source word (text or index) for the line plots")
    p.add_argument("--heads", default="0,1", help="heads for the Figure 4 style plot, e.g. 0,1")
    p.add_argument("--out", type=Path, required=True, help="folder for the figures and attention.json")
    a = p.parse_args(argv)
    from attn_only_plugin.api.hub import load

    try:
        heads = [int(h) for h in a.heads.split(",") if h.strip()]
    except ValueError:
        raise PluginError(f"--heads {a.heads!r} must be comma-separated head numbers, e.g. 0,1") from None
    mt = load(a.checkpoint_dir, a.checkpoint_file, data=a.data, spm_model=a.spm_model)
    att = mt.attention(a.source, a.target)
    for path in render(att, a.out, a.layer, a.word, heads):
        print(f"[attention] wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
