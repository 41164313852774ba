"""Weight conversion between fairseq's built-in `transformer` and our model.

Both compute the function of section 3 of Vaswani et al. (2017); only the parameter layout
differs. fairseq keeps W^Q, W^K, W^V as three matrices (q_proj, k_proj, v_proj), we fuse them
(self-attention: qkv; encoder-decoder attention: q and kv). fairseq's learned positional table
has padding_idx + 1 unused leading rows (its positions start at padding_idx + 1); ours starts at
position 0. Sinusoidal encodings are not converted: fairseq's concatenated [sin | cos] layout is
a different function from section 3.5's interleaved one.
"""

import re
from typing import Dict

import torch
from torch import Tensor

from attn_only_tools.guards.errors import PluginError

# (ours, fairseq) name fragments inside one layer, same shapes on both sides
_LAYER_MAP = {
    "encoder": [
        ("self_attn.out", "self_attn.out_proj"),
        ("sub_attn.norm", "self_attn_layer_norm"),
        ("ffn.w1", "fc1"),
        ("ffn.w2", "fc2"),
        ("sub_ffn.norm", "final_layer_norm"),
    ],
    "decoder": [
        ("self_attn.out", "self_attn.out_proj"),
        ("sub_self.norm", "self_attn_layer_norm"),
        ("cross_attn.q", "encoder_attn.q_proj"),
        ("cross_attn.out", "encoder_attn.out_proj"),
        ("sub_cross.norm", "encoder_attn_layer_norm"),
        ("ffn.w1", "fc1"),
        ("ffn.w2", "fc2"),
        ("sub_ffn.norm", "final_layer_norm"),
    ],
}


def _num_layers(sd: Dict[str, Tensor], side: str) -> int:
    ids = {int(m.group(1)) for k in sd for m in [re.match(rf"{side}\.layers\.(\d+)\.", k)] if m}
    return max(ids) + 1 if ids else 0


def fairseq_to_ours(sd: Dict[str, Tensor], padding_idx: int) -> Dict[str, Tensor]:
    """State dict of fairseq's TransformerModel (learned or no positions) -> ours."""
    if any(k.endswith("embed_positions._float_tensor") for k in sd):
        raise PluginError(
            "this fairseq model uses sinusoidal positions ([sin | cos] layout, not "
            "section 3.5's): only models trained with --encoder-learned-pos "
            "--decoder-learned-pos convert exactly"
        )
    out = {}
    for side in ("encoder", "decoder"):
        out[f"{side}.embed.tokens.weight"] = sd[f"{side}.embed_tokens.weight"]
        if f"{side}.embed_positions.weight" in sd:
            out[f"{side}.embed.positions.weight"] = sd[f"{side}.embed_positions.weight"][padding_idx + 1 :]
        if f"{side}.layer_norm.weight" in sd:
            for p in ("weight", "bias"):
                out[f"{side}.final_norm.{p}"] = sd[f"{side}.layer_norm.{p}"]
        for i in range(_num_layers(sd, side)):
            pre = f"{side}.layers.{i}."  # the same layer prefix on both sides
            for p in ("weight", "bias"):
                for a, b in _LAYER_MAP[side]:
                    out[f"{pre}{a}.{p}"] = sd[f"{pre}{b}.{p}"]
                out[f"{pre}self_attn.qkv.{p}"] = torch.cat([sd[f"{pre}self_attn.{x}_proj.{p}"] for x in "qkv"], dim=0)
                if side == "decoder":
                    out[f"{pre}cross_attn.kv.{p}"] = torch.cat(
                        [sd[f"{pre}encoder_attn.{x}_proj.{p}"] for x in "kv"], dim=0
                    )
    out["decoder.output_weight"] = sd.get("decoder.output_projection.weight", sd["decoder.embed_tokens.weight"])
    return out


def ours_to_fairseq(sd: Dict[str, Tensor], padding_idx: int, d_k: int, d_v: int, heads: int) -> Dict[str, Tensor]:
    """Our state dict -> fairseq's TransformerModel (needs d_k = d_v = d_model / h)."""
    if d_k != d_v:
        raise PluginError(f"fairseq's transformer needs d_k = d_v; this model has d_k={d_k}, d_v={d_v}")
    out = {}
    for side in ("encoder", "decoder"):
        out[f"{side}.embed_tokens.weight"] = sd[f"{side}.embed.tokens.weight"]
        if f"{side}.embed.positions.weight" in sd:
            table = sd[f"{side}.embed.positions.weight"]
            lead = table.new_zeros(padding_idx + 1, table.size(1))  # rows fairseq never uses
            out[f"{side}.embed_positions.weight"] = torch.cat([lead, table], dim=0)
        if f"{side}.final_norm.weight" in sd:
            for p in ("weight", "bias"):
                out[f"{side}.layer_norm.{p}"] = sd[f"{side}.final_norm.{p}"]
        for i in range(_num_layers(sd, side)):
            pre = f"{side}.layers.{i}."
            for p in ("weight", "bias"):
                for a, b in _LAYER_MAP[side]:
                    out[f"{pre}{b}.{p}"] = sd[f"{pre}{a}.{p}"]
                q, k, v = sd[f"{pre}self_attn.qkv.{p}"].split([heads * d_k, heads * d_k, heads * d_v], dim=0)
                out.update(
                    {f"{pre}self_attn.q_proj.{p}": q, f"{pre}self_attn.k_proj.{p}": k, f"{pre}self_attn.v_proj.{p}": v}
                )
                if side == "decoder":
                    k, v = sd[f"{pre}cross_attn.kv.{p}"].split([heads * d_k, heads * d_v], dim=0)
                    out.update({f"{pre}encoder_attn.k_proj.{p}": k, f"{pre}encoder_attn.v_proj.{p}": v})
    out["decoder.output_projection.weight"] = sd["decoder.output_weight"]
    return out
