"""The speed levers that are not the paper's, off by default (docs/speed.md, "The GPU speed
levers"), through the real CLIs on the CPU: fairseq's --required-seq-len-multiple (lengths
padded to a few buckets) trains with the same losses, fairseq-train accepts --compile-layers and
--varlen-attention, --fused-softmax-loss keeps the losses, and
fairseq-generate with --static-decoding-cache writes the same hypotheses (scores to float rounding)."""

import re

import pytest

from attn_only_tools import generate_log
from helpers import PLUGIN, TINY, reversal_data, run, train


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("levers")
    reversal_data(root, 400)  # the text in root, its data-bin in root/bin
    return root


def losses(proc) -> list:
    """The loss of every update that fairseq-train logged (--log-interval 1)."""
    return [float(m) for m in re.findall(r"\| loss ([\d.]+)|loss=([\d.]+)", proc.stdout + proc.stderr) for m in m if m]


def test_padding_lengths_to_a_multiple_keeps_the_losses(data, tmp_path):
    """Pads are masked (attention) or skipped (packing), so 8-token buckets change no loss."""
    args = (
        "--arch",
        "transformer_base",
        *TINY,
        "--dropout",
        "0",
        "--log-interval",
        "1",
        "--disable-validation",
        "--no-save",
    )
    plain = train(data / "bin", tmp_path / "plain", *args, max_update=4)
    bucketed = train(data / "bin", tmp_path / "bucketed", *args, "--required-seq-len-multiple", "8", max_update=4)
    assert len(losses(plain)) >= 4 and losses(bucketed) == losses(plain)


def test_fairseq_train_accepts_compile_layers(data, tmp_path):
    """torch.compile of the layers inside fairseq-train (its equality with eager: tests/modules/test_compiled.py)."""
    proc = train(data / "bin", tmp_path / "ckpt", "--arch", "transformer_base", *TINY, "--compile-layers", max_update=3)
    assert "done training" in proc.stdout + proc.stderr and len(losses(proc)) >= 1


def test_fairseq_train_with_varlen_attention_on_a_cpu_keeps_the_losses(data, tmp_path):
    """--varlen-attention inside fairseq-train: on a CPU attention keeps the padded path (the kernel
    is CUDA's; its equality with the padded path: tests/modules/test_varlen.py), and every batch
    packs, which changes the losses by float rounding at most."""
    args = ("--arch", "transformer_base", *TINY, "--dropout", "0", "--log-interval", "1", "--disable-validation")
    plain = losses(train(data / "bin", tmp_path / "plain", *args, "--no-save", max_update=4))
    fast = losses(train(data / "bin", tmp_path / "varlen", *args, "--no-save", "--varlen-attention", max_update=4))
    assert len(plain) >= 4 and fast == pytest.approx(plain, abs=2e-3)


def test_fairseq_train_with_the_fused_softmax_loss_keeps_the_losses(data, tmp_path):
    """--fused-softmax-loss inside fairseq-train (criterions/fused_softmax.py; eager on a CPU): the
    same logged losses and accuracy, to float rounding."""
    args = ("--arch", "transformer_base", *TINY, "--log-interval", "1", "--disable-validation", "--no-save")
    args += ("--report-accuracy",)
    plain = train(data / "bin", tmp_path / "plain", *args, max_update=4)
    fused = train(data / "bin", tmp_path / "fused", *args, "--fused-softmax-loss", max_update=4)
    assert len(losses(plain)) >= 4 and losses(fused) == pytest.approx(losses(plain), abs=2e-3)
    accuracy = re.compile(r"accuracy[ =]([\d.]+)")
    assert accuracy.findall(fused.stdout + fused.stderr) == accuracy.findall(plain.stdout + plain.stderr) != []


def hypotheses(stdout: str) -> dict:
    """fairseq-generate's H- lines: sentence id -> (score, tokens)."""
    return {i: s.hypotheses[0] for i, s in generate_log.parse(stdout.splitlines()).items() if s.hypotheses}


def test_fairseq_generate_with_static_decoding_cache(data, tmp_path):
    """The same hypotheses; scores to float rounding (modules/static_cache.py)."""
    train(data / "bin", tmp_path / "ckpt", "--arch", "transformer_base", *TINY, "--disable-validation", max_update=30)

    def generate(*extra):
        args = ("--path", tmp_path / "ckpt" / "checkpoint_last.pt", "--beam", 4, "--lenpen", 0.6, "--batch-size", 50)
        return hypotheses(run("fairseq-generate", data / "bin", "--user-dir", PLUGIN, *args, *extra).stdout)

    growing, fixed = generate(), generate("--model-overrides", "{'static_decoding_cache': True}")
    assert len(growing) == 100 and fixed.keys() == growing.keys()
    assert all(fixed[i][1] == growing[i][1] and abs(fixed[i][0] - growing[i][0]) < 1e-4 for i in growing)
    # the override reaches the model: with a window it is refused, in one line
    refused = run(
        "fairseq-generate",
        data / "bin",
        "--user-dir",
        PLUGIN,
        "--path",
        tmp_path / "ckpt" / "checkpoint_last.pt",
        "--model-overrides",
        "{'static_decoding_cache': True, 'attention_window': 2}",
        ok=False,
    )
    assert refused.returncode == 1 and "--static-decoding-cache works with full self-attention only" in refused.stderr


def test_bf16_trains_with_the_losses_of_fp32(data, tmp_path):
    """fairseq-train --bf16 (fairseq_fixes.py, 12: without it, --bf16 implied --tpu and failed without
    torch_xla): the model in bfloat16 with fp32 master weights, each update's loss within 1% of fp32's."""
    args = ("--arch", "transformer_base", *TINY, "--dropout", "0", "--log-interval", "1", "--disable-validation")
    fp32 = losses(train(data / "bin", tmp_path / "fp32", *args, "--no-save", max_update=4))
    bf16 = losses(train(data / "bin", tmp_path / "bf16", *args, "--no-save", "--bf16", max_update=4))
    assert len(bf16) == len(fp32) >= 4 and all(abs(b - f) < 0.01 * f for b, f in zip(bf16, fp32, strict=True))
