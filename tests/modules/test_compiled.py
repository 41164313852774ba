"""torch.compile of the layers (modules/compiled.py, --compile-layers): the compiled training step
gives eager's loss and gradients to float rounding (dropout on, drawn from eager's generator),
the parameters and checkpoints are the eager model's, inference runs the eager layers, and each
layer is traced whole on the paths a GPU takes."""

import pytest
import torch
import torch._inductor.config as inductor_config

from attn_only_plugin.criterions.label_smoothed_ce import label_smoothed_nll_loss, target_lprobs
from attn_only_plugin.modules import compiled, kernels, varlen
from helpers import build_model, make_dictionary, random_batch, traceable_varlen


def loss_and_grads(model, d, batches):
    """The paper's smoothed loss (as paper_label_smoothed_ce computes it) and its gradients, per batch."""
    model.train()
    out = []
    for src, prev in batches:
        model.zero_grad()
        target = torch.cat([prev[:, 1:], torch.full((prev.size(0), 1), d.eos())], dim=1)
        prev, target = prev.clone(), target.clone()
        prev[1, 3:], target[1, 2], target[1, 3:] = d.pad(), d.eos(), d.pad()  # row 1 right-padded: packed
        sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(d.pad()).sum(1), "prev_output_tokens": prev}}
        sample["target"] = target
        torch.manual_seed(5)  # the same dropout draws
        lprobs, tgt = target_lprobs(model, sample, d.pad())
        loss, _ = label_smoothed_nll_loss(lprobs, tgt, 0.1, d.pad())
        loss.backward()
        out.append((loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    return out


def test_compiled_layers_give_eager_losses_and_gradients(monkeypatch):
    # dropout from eager's generator, set through the config's own patch, which puts the config back
    # whole (monkeypatch's undo does not: later compilations in the same process would miss the key)
    with inductor_config.patch(fallback_random=True):
        torch._dynamo.reset()
        d = make_dictionary(30)
        eager = build_model(d, dropout=0.1)
        fast = build_model(d, dropout=0.1, compile_layers=True)
        assert fast.state_dict().keys() == eager.state_dict().keys()
        fast.load_state_dict(eager.state_dict())
        # two shapes: the second makes torch.compile recompile with dynamic sizes
        batches = [random_batch(d, B=3, S=7, T=6, seed=0), random_batch(d, B=4, S=9, T=5, seed=1)]
        calls = []
        original = compiled.layer_to_run

        def spy(layer, table, training):
            chosen = original(layer, table, training)
            calls.append(chosen is not layer)
            return chosen

        monkeypatch.setattr("attn_only_plugin.models.encoder_decoder.layer_to_run", spy)
        got = loss_and_grads(fast, d, batches)
        assert calls and all(calls)  # every layer of every step ran compiled
        want = loss_and_grads(eager, d, batches)
        for (loss, grads), (loss_ref, grads_ref) in zip(got, want, strict=True):
            assert abs(loss - loss_ref) < 1e-5 * abs(loss_ref)
            assert grads.keys() == grads_ref.keys()
            for name, g in grads.items():
                torch.testing.assert_close(g, grads_ref[name], rtol=1e-4, atol=1e-6, msg=name)


def test_inference_runs_the_eager_layers():
    d = make_dictionary(10)
    model = build_model(d, compile_layers=True)
    layer = model.encoder.layers[0]
    assert compiled.layer_to_run(layer, model.encoder.compiled, training=True) is not layer
    assert compiled.layer_to_run(layer, model.encoder.compiled, training=False) is layer
    with torch.no_grad():
        assert compiled.layer_to_run(layer, model.encoder.compiled, training=True) is layer
    assert build_model(d).encoder.compiled == {}  # off by default


@pytest.mark.parametrize("varlen_attention", [False, True])
def test_each_layer_is_one_graph_on_the_gpu_paths(monkeypatch, varlen_attention, dynamo_counters):
    """On CUDA, ours picks the attention kernel from torch.backends.cuda (kernels.py) and, with
    --varlen-attention, runs attention on the packed rows: neither may break a compiled layer into
    pieces (each piece would be recompiled for each layer until torch.compile gives up and runs it
    eagerly). Three batch shapes: one graph per layer kind and shape kind (static, then dynamic)."""
    monkeypatch.setattr(kernels, "chooses_kernel", lambda q: True)  # the CUDA branch, on the CPU
    monkeypatch.setattr(varlen, "kernel_runs", lambda x: True)
    monkeypatch.setattr(varlen, "KERNEL", traceable_varlen)
    graphs = []  # torch.compile's tracing, without a compiler: each graph kept and run as traced

    def keep(graph, example_inputs):
        graphs.append(str(graph.graph))
        return graph.forward

    monkeypatch.setattr(compiled, "BACKEND", keep)
    d = make_dictionary(30)
    model = build_model(d, dropout=0.1, compile_layers=True, varlen_attention=varlen_attention)
    shapes = [dict(B=3, S=7, T=6, seed=0), dict(B=4, S=9, T=5, seed=1), dict(B=2, S=5, T=8, seed=2)]
    losses = loss_and_grads(model, d, [random_batch(d, **shape) for shape in shapes])
    assert all(torch.isfinite(torch.tensor(loss)) for loss, _ in losses)
    assert dict(dynamo_counters["graph_break"]) == {}
    assert len(graphs) == 4  # encoder and decoder layer, static and dynamic sizes
    assert all(("bucketize" in graph) == varlen_attention for graph in graphs)  # the packed path where asked
