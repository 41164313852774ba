"""Training peak memory for benchmarks/benchmark.py: one fresh process per model (its peak RSS on a
CPU, CUDA max allocated on a GPU), a few training steps of the same batches; with
--checkpoint-activations ours once more with its layers recomputed in the backward pass.
"""

import resource

from .common import build_pair, device_batches, half_dtype, levers
from .training import optimizer_for, trainer


def peak_memory(device):
    """This process's peak memory in MiB: CUDA max allocated, or the peak RSS on a CPU."""
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB (Linux reports KiB)


def train_memory(which, shape, device, amp, n_steps, batch_size, batching, optimizer, recompute=False):
    """Runs in its own process: the peak memory of training `which` ('ours' or 'fairseq') for
    n_steps steps (the process's peak RSS on a CPU, CUDA max allocated on a GPU); recompute:
    ours with --checkpoint-activations."""
    import torch

    theirs, ours, d = build_pair(shape)
    ours.encoder.recompute = ours.decoder.recompute = recompute
    model = (ours if which == "ours" else theirs).to(device).train()
    del theirs, ours
    fused = which == "ours" and levers(shape)["fused_loss"]  # --fused-softmax-loss
    step = trainer(model, device, amp, d.pad(), optimizer_for(which, optimizer), half_dtype(shape, device), fused)
    batches = device_batches(d, device, batch_size, batching)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for i in range(n_steps):
        step(batches[i % len(batches)])
    return peak_memory(device)
