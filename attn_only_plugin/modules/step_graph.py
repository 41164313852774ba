"""One decoding step replayed as a CUDA graph (`--cuda-graph-decoding`): speed only, not the paper's.
Section 6.1 of Vaswani et al. (2017) decodes by beam search, one decoder step per output position
(section 3.2.3's masked self-attention over the earlier ones); the maths of a step is unchanged.

A decoder step launches hundreds of small kernels; on a GPU their launch overhead, not the work,
bounds beam search with small batches. torch.cuda.CUDAGraph records the kernels of one step once
and replays them with one launch, reading its inputs from, and writing its output to, the same
tensors every time. So a step may be graphed only while every tensor it reads or writes is the
same (same storage, same shape) from step to step: with `--batched-search` (a batch that keeps
its size) and `--static-decoding-cache` (static_cache.py: fixed-size buffers, in-place writes
and reorders) that holds within one STATIC_CHUNK-step chunk of the cache, and the caller's key
(the chunk) says which graph a step replays: a new key captures a new one.

Departs from fairseq, which has no graphed decoding. On a CPU (or with key None) the step runs
eagerly, as the plain function: the same results, nothing captured.

Tensor layout: whatever the step function takes and returns; inputs are copied into the graph's
own input tensors of the same shapes, and the output tensor is the graph's, overwritten by the
next replay.
"""

from typing import Callable, Dict, Hashable, List, NamedTuple, Optional

from torch import Tensor, cuda

WARMUP_RUNS = 2  # eager runs on a side stream before a capture (torch's advice); not the paper's


def graphable(x: Tensor) -> bool:
    """Whether steps on x's device can be graphed: CUDA only."""
    return x.is_cuda


class Captured(NamedTuple):
    """One key's graph, the input tensors it reads and the output tensor it writes."""

    graph: object
    inputs: List[Tensor]
    output: Tensor


class StepGraph:
    """fn(*inputs) -> Tensor, replayed as a CUDA graph per key. fn may change tensors it closes
    over (a cache) only in place, and must give the same result when run again on the same inputs
    (the warm-up runs and the capture run it more than once), or name in `state()` the tensors it
    changes otherwise (a search's buffers): they are put back as they were after each of those
    runs, so that only the replay changes them.

    Each key's graph is kept, for the next search over the same buffers (tasks/batched_search.py
    keeps them). The graphs share one memory pool for what they make inside: safe because they are
    replayed one at a time on one stream and each replay's output is used before the next replay."""

    def __init__(self, fn: Callable[..., Tensor], state: Callable[[], List[Tensor]] = list):
        self.fn, self.state = fn, state
        self.graphs: Dict[Hashable, Captured] = {}
        self.pool = None  # the graphs' shared memory pool, from the first capture
        self.captures = 0  # graphs captured so far

    def __call__(self, key: Optional[Hashable], *inputs: Tensor) -> Tensor:
        """fn(*inputs): eagerly on a CPU or with key None; else the graph of `key` (captured
        first if the key is new), with inputs copied into its input tensors."""
        if key is None or not graphable(inputs[0]):
            return self.fn(*inputs)
        if key not in self.graphs:
            self.capture(key, inputs)
        graph, static_inputs, output = self.graphs[key]
        for static, x in zip(static_inputs, inputs, strict=True):
            static.copy_(x)
        graph.replay()
        return output

    def capture(self, key: Hashable, inputs) -> None:
        """Warm up on a side stream (allocator and library state settle there), then record fn
        into the key's graph."""
        static_inputs = [x.clone() for x in inputs]
        side = cuda.Stream()
        side.wait_stream(cuda.current_stream())
        with cuda.stream(side):
            saved = [t.clone() for t in self.state()]
            for _ in range(WARMUP_RUNS):
                self.fn(*static_inputs)
                put_back(self.state(), saved)
        cuda.current_stream().wait_stream(side)
        graph = cuda.CUDAGraph()
        with cuda.graph(graph, pool=self.pool):
            output = self.fn(*static_inputs)
        put_back(self.state(), saved)  # a capture records and runs nothing; a stand-in for it may run fn
        self.pool = self.pool if self.pool is not None else graph.pool()
        self.graphs[key] = Captured(graph, static_inputs, output)
        self.captures += 1


def put_back(tensors: List[Tensor], saved: List[Tensor]) -> None:
    """Each tensor's values back to its saved copy, in place."""
    for t, s in zip(tensors, saved, strict=True):
        t.copy_(s)
