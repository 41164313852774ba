"""Attention on packed rows (modules/varlen.py, --varlen-attention): with a reference of the
kernel's maths standing in for FlashAttention's CUDA kernel, a training step gives the padded
path's loss and gradients, every attention call of it takes the packed path, and whatever the
kernel cannot take (dropout on the weights, a CPU) goes the padded way. On CUDA the real kernel
against the padded path."""

import pytest
import torch

from attn_only_plugin.criterions.label_smoothed_ce import label_smoothed_nll_loss, target_lprobs
from attn_only_plugin.modules import varlen
from attn_only_plugin.modules.packing import Packing, one_run_per_row, source_packing, target_packing
from helpers import build_model, make_dictionary, random_batch, reference_varlen


@pytest.fixture
def on_cpu(monkeypatch):
    """The packed path on the CPU: the reference as the kernel, counting its calls."""
    calls = []
    monkeypatch.setattr(varlen, "kernel_runs", lambda x: True)
    monkeypatch.setattr(varlen, "KERNEL", lambda *a: calls.append(a[-1]) or reference_varlen(*a))
    return calls


def test_sequences_are_each_rows_run_of_packed_rows():
    real = torch.tensor([[False, True, True], [True, True, True], [True, False, False]])  # (B, T) = (3, 3)
    offsets, longest = Packing(real, varlen=True).sequences
    assert offsets.tolist() == [0, 2, 5, 6] and offsets.dtype == torch.int32 and longest == 3


def test_one_run_per_row():
    assert one_run_per_row(torch.tensor([[False, True, True], [True, True, False], [True, True, True]]))
    assert not one_run_per_row(torch.tensor([[True, False, True]]))  # a pad between real tokens
    real = torch.tensor([[True, False, True], [True, True, True]])
    assert source_packing(real, True, varlen=True).varlen is False  # packs, attention unpacks


def test_varlen_packs_without_pads_and_only_in_training():
    real = torch.ones(2, 4, dtype=torch.bool)
    assert Packing.of(real, True) is None and source_packing(real, True, varlen=True).varlen
    assert source_packing(real, False, varlen=True) is None
    tokens = torch.tensor([[5, 6, 1], [5, 1, 1]])  # right-padded, pad = 1
    assert target_packing(tokens, 1, True, varlen=True).varlen


def loss_and_grads(model, d, src, prev):
    """The paper's smoothed loss and its gradients on one batch, dropout drawn from seed 5."""
    model.train()
    model.zero_grad()
    target = torch.cat([prev[:, 1:], prev.new_full((prev.size(0), 1), d.pad())], dim=1)
    target[torch.arange(prev.size(0)), prev.ne(d.pad()).sum(1) - 1] = d.eos()  # each row's last real position
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(d.pad()).sum(1), "prev_output_tokens": prev}}
    sample["target"] = target
    torch.manual_seed(5)
    lprobs, tgt = target_lprobs(model, sample, d.pad())
    loss, _ = label_smoothed_nll_loss(lprobs, tgt, 0.1, d.pad())
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def batch(d):
    src, prev = random_batch(d, B=4, S=7, T=6, seed=3)
    prev[0, 3:] = d.pad()  # right-padded targets of different lengths
    prev[2, 5:] = d.pad()
    src[3, :5] = d.pad()  # a short source
    return src, prev


@pytest.mark.parametrize("pre_norm", [False, True])
def test_packed_attention_gives_the_padded_loss_and_gradients(on_cpu, pre_norm):
    d = make_dictionary(30)
    padded = build_model(d, dropout=0.1, pre_norm=pre_norm).double()
    fast = build_model(d, dropout=0.1, pre_norm=pre_norm, varlen_attention=True).double()
    fast.load_state_dict(padded.state_dict())
    src, prev = batch(d)
    loss, grads = loss_and_grads(fast, d, src, prev)
    # every attention call of the step: per layer 1 in the encoder, 2 in the decoder (causal first)
    assert on_cpu == [False] * 2 + [True, False] * 2
    loss_ref, grads_ref = loss_and_grads(padded, d, src, prev)
    assert abs(loss - loss_ref) < 1e-12 * abs(loss_ref)
    assert grads.keys() == grads_ref.keys()
    for name, g in grads.items():
        torch.testing.assert_close(g, grads_ref[name], rtol=1e-9, atol=1e-12, msg=name)


def test_what_the_kernel_cannot_take_goes_the_padded_way(on_cpu, monkeypatch, caplog):
    d = make_dictionary(30)
    src, prev = batch(d)
    loss_and_grads(build_model(d, attention_dropout=0.1, varlen_attention=True), d, src, prev)
    assert on_cpu == []  # dropout on the weights, said when the model is built
    assert "--varlen-attention: attention dropout 0.1 keeps attention on the padded path" in caplog.text
    model = build_model(d, varlen_attention=True)
    with torch.no_grad():  # inference never packs
        model.eval()(src, src.ne(d.pad()).sum(1), prev)
    assert on_cpu == []
    monkeypatch.undo()
    assert not varlen.kernel_runs(torch.zeros(2, 3, dtype=torch.float16))  # a CPU: never the kernel


def test_window_keeps_encoder_decoder_attention_packed(on_cpu):
    d = make_dictionary(30)
    src, prev = batch(d)
    loss_and_grads(build_model(d, attention_window=2, varlen_attention=True), d, src, prev)
    assert on_cpu == [False, False]  # the decoder's encoder-decoder attention, per layer


def test_causal_as_the_installed_torch_takes_it(monkeypatch):
    def first(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, return_aux=None):
        pass

    def later(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, window_size=(-1, -1)):
        pass

    assert varlen.causal_arguments(first) == {"is_causal": True}
    assert varlen.causal_arguments(later) == {"window_size": (-1, 0)}
    assert varlen.causal_arguments(None) == {}
    seen = []
    monkeypatch.setattr(varlen, "varlen_attn", lambda *args, **kwargs: seen.append((args[3:], kwargs)))
    rows = Packing(torch.tensor([[True, True, False], [True, True, True]]), varlen=True)
    q = torch.zeros(5, 2, 8)
    varlen.flash_varlen(q, q, q, rows, rows, causal=True)
    varlen.flash_varlen(q, q, q, rows, rows, causal=False)
    (args, causal), (_, plain) = seen
    assert args[0].tolist() == [0, 2, 5] and args[2:] == (3, 3)
    assert causal == varlen.CAUSAL and plain == {}


@pytest.mark.skipif(not torch.cuda.is_available() or varlen.varlen_attn is None, reason="needs CUDA and torch >= 2.10")
def test_flash_kernel_gives_the_padded_loss_on_cuda():
    d = make_dictionary(30)
    padded = build_model(d, dropout=0.1, d_model=64, heads=4).cuda()
    fast = build_model(d, dropout=0.1, d_model=64, heads=4, varlen_attention=True).cuda()
    fast.load_state_dict(padded.state_dict())
    src, prev = (t.cuda() for t in batch(d))
    with torch.autocast("cuda", dtype=torch.float16):
        loss, _ = loss_and_grads(fast, d, src, prev)
        loss_ref, _ = loss_and_grads(padded, d, src, prev)
    assert abs(loss - loss_ref) < 1e-2 * abs(loss_ref)
