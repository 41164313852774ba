"""modules/step_graph.py's StepGraph without a GPU: on a CPU it is the plain function; its capture
and replay bookkeeping (one capture per key, inputs copied into the graph's own, the same output
tensor every replay) against a stand-in for torch.cuda whose "graph" reruns the function on the
captured inputs; each key's graph kept, all sharing the first one's memory pool."""

import contextlib
from types import SimpleNamespace

import torch

from attn_only_plugin.modules import step_graph
from attn_only_plugin.modules.step_graph import StepGraph


def test_on_a_cpu_it_is_the_function():
    calls = []
    graph = StepGraph(lambda x, y: calls.append(1) or x * 2 + y)
    x, y = torch.arange(3.0), torch.ones(3)
    assert torch.equal(graph(64, x, y), x * 2 + y) and torch.equal(graph(None, x, y), x * 2 + y)
    assert calls == [1, 1] and graph.captures == 0


class FakeGraph:
    """Records the function run inside `graph(...)`; replay() reruns it, writing into the output."""

    def __init__(self):
        self.run = None

    def pool(self):
        return ("pool of", self)

    def replay(self):
        self.output.copy_(self.run())


def fake_cuda(monkeypatch, log):
    stream = SimpleNamespace(wait_stream=lambda other: None)

    @contextlib.contextmanager
    def graph(g, pool=None):
        log.append(("capture", pool))
        yield

    monkeypatch.setattr(
        step_graph,
        "cuda",
        SimpleNamespace(
            Stream=lambda: stream,
            current_stream=lambda: stream,
            stream=lambda s: contextlib.nullcontext(),
            CUDAGraph=FakeGraph,
            graph=graph,
        ),
    )
    monkeypatch.setattr(step_graph, "graphable", lambda x: True)


def test_one_capture_per_key_and_replays_read_the_new_inputs(monkeypatch):
    log = []
    fake_cuda(monkeypatch, log)
    state = torch.zeros(2)  # what a cache is to a decoder step: written in place
    calls = []

    def fn(x, pos):
        calls.append(1)
        state[0] = pos[0]
        return x + pos

    graph = StepGraph(fn)
    original_capture = graph.capture

    def capture(key, inputs):
        original_capture(key, inputs)
        captured = graph.graphs[key]
        captured.graph.run, captured.graph.output = (lambda: fn(*captured.inputs)), captured.output

    graph.capture = capture
    outputs = []
    for step, key in [(1, 64), (2, 64), (3, 64), (65, 128), (66, 128), (4, 64)]:  # then 64's graph again
        x, pos = torch.full((2,), float(step)), torch.tensor([step])
        out = graph(key, x, pos)
        outputs.append(out)
        assert torch.equal(out, x + pos) and state[0] == step  # the new inputs, not the captured ones
    first = graph.graphs[64].graph
    assert log == [("capture", None), ("capture", ("pool of", first))] and graph.captures == 2
    assert outputs[0] is outputs[1] is outputs[2] is outputs[5] and outputs[3] is outputs[4] is not outputs[0]
    assert len(calls) == 2 * (step_graph.WARMUP_RUNS + 1) + 6  # warm-ups and capture, then one run a replay
