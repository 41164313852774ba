"""The Triton kernels (modules/beam_reorder.py, modules/decode_attention.py) compile, on this CPU,
for the GPUs the project is lent (Hopper, sm_90) and for Ampere (sm_80): Triton lowers a kernel to
PTX and, with the ptxas it carries, to a cubin without a GPU. This is what Triton's interpreter,
which the other kernel tests run, does not show: that the compiler takes the kernels, and that in
the beam reorder's compiled code every read of a program comes before its barrier and every write
after it (the in-place reorder is safe only so). Where Triton is installed (the CUDA wheels' torch
brings it: `bash scripts/test_torch.sh 2.11.0`); in a process of its own, without the interpreter
that tests/conftest.py turns on."""

import json
import os
import subprocess
import sys

import pytest

COMPILE = r"""
import itertools, json
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from attn_only_plugin.modules import beam_reorder, decode_attention

def compiled(fn, types, constexprs, arch):
    source = ASTSource(fn=fn, signature=dict(zip(fn.arg_names, types)), constexprs=constexprs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32)).asm

def order(ptx):
    ops = [op for line in ptx.splitlines() for op in ("ld.global", "bar.sync", "st.global") if op in line]
    return [op for op, _ in itertools.groupby(ops)]

out = {}
for arch, dtype in itertools.product((90, 80), ("fp16", "fp32")):
    for k, group, block in ((4, 4, 1024), (21, 32, 128), (1, 1, 4096)):
        types = [f"*{dtype}", "*i64", "*i64", "i32", "i32", "i32"] + ["constexpr"] * 3
        asm = compiled(beam_reorder.kernel(False), types, dict(K=k, GROUP=group, BLOCK=block), arch)
        out[f"reorder sm_{arch} {dtype} k={k}"] = dict(ops=order(asm["ptx"]), cubin=len(asm["cubin"]))
    for S in (64, 128):
        types = [f"*{dtype}"] * 5 + ["fp32"] + ["i32"] * 9 + ["constexpr"] * 4
        asm = compiled(decode_attention.kernel(False), types, dict(S=S, DK=64, DV=64, BLOCK=64), arch)
        out[f"decode sm_{arch} {dtype} S={S}"] = dict(cubin=len(asm["cubin"]))
print(json.dumps(out))
"""


def test_the_kernels_compile_for_the_gpus_and_the_reorder_reads_before_it_writes():
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(out) == 2 * 2 * (3 + 2)
    for name, asm in out.items():
        assert asm["cubin"] > 0, name
        if name.startswith("reorder"):
            assert asm["ops"] == ["ld.global", "bar.sync", "st.global"], name  # reads, the barrier, writes
