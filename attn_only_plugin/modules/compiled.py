"""torch.compile of the encoder and decoder layers (section 3.1's stacks): a speed path, not the
paper's, which leaves its maths as layers.py and attention.py write it.

Not in the paper, which says nothing about kernels. `--compile-layers` (off by default, so a CPU
and every test run the eager layers) hands each layer to torch.compile for the training steps:
its compiler fuses the small element-wise kernels around the matrix products (LayerNorm,
dropout, residual adds, section 5.4), which on a GPU run as separate kernels, each launched from
Python. The compiled layer computes the same function to float rounding (the fused kernels sum
in another order); its dropout masks come from the compiler's own random stream, not eager's
(same distribution, same P_drop), unless torch._inductor.config.fallback_random is set.
Inference (validation, beam search with its growing caches) runs the eager layers.

Shapes: a packed batch (packing.py) has N real rows, new for every batch; torch.compile
recompiles for a second shape and then treats the sizes as dynamic. Padding lengths to a few
buckets (fairseq's --required-seq-len-multiple) makes shapes repeat.

Tensor layout: as in layers.py.
"""

from typing import Callable, Dict

import torch
from torch import nn

BACKEND = "inductor"  # torch.compile's default compiler; tests may name a cheaper one


def compile_layers(layers: nn.ModuleList) -> Dict[int, Callable]:
    """{id(layer): the layer compiled by torch.compile} for each layer. Kept outside the module
    tree, so parameters, state_dict keys and checkpoints are the eager layers' own."""
    return {id(layer): torch.compile(layer, backend=BACKEND) for layer in layers}


def layer_to_run(layer: nn.Module, compiled: Dict[int, Callable], training: bool) -> Callable:
    """The compiled layer in a training step with gradients, the eager one otherwise."""
    if training and torch.is_grad_enabled():
        return compiled.get(id(layer), layer)
    return layer
