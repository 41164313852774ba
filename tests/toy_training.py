"""Real fairseq-train runs small enough for a busy 2-core CPU, shared by test_resume.py and
test_distributed.py: a digit-reversal corpus of 200 sentences (13 batches of 16, the last one 8),
the paper's training flags on a d_model 32, 2 + 2 layer model, and checkpoint reading.

Every process runs with one OpenMP thread: results then do not depend on how many cores the
machine has or how busy it is (a reduction split over 2 threads rounds differently from 1), and
two processes of a distributed run do not fight over the same cores.
"""

import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = str(ROOT / "attn_only_plugin")
BIN = Path(sys.executable).parent
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", PYTHONUNBUFFERED="1")
TIMEOUT = 300


def run(*cmd):
    """Run a command to completion; fail the test with its output's tail if it fails."""
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=TIMEOUT)
    assert proc.returncode == 0, f"{cmd[0]} failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}"
    return proc


def toy_data(root: Path, n_train: int = 200, seed: int = 0, n_test: int = 0) -> Path:
    """Write source digit strings and their reversals, binarize them (a test split too when n_test);
    returns the data-bin folder."""
    rng = random.Random(seed)
    splits = [("train", n_train), ("valid", 20)] + ([("test", n_test)] if n_test else [])
    for split, n in splits:
        rows = [[str(rng.randint(0, 9)) for _ in range(rng.randint(3, 8))] for _ in range(n)]
        (root / f"{split}.src").write_text("".join(" ".join(r) + "\n" for r in rows))
        (root / f"{split}.tgt").write_text("".join(" ".join(reversed(r)) + "\n" for r in rows))
    run(
        BIN / "fairseq-preprocess",
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
        "--trainpref",
        root / "train",
        "--validpref",
        root / "valid",
        *(["--testpref", root / "test"] if n_test else []),
        "--destdir",
        root / "bin",
        "--joined-dictionary",
        "--workers",
        1,
    )
    return root / "bin"


def train_args(data: Path, save_dir: Path, max_update: int, dropout: float, *extra) -> list:
    """fairseq-train's arguments (without the program): fixed batches of 16 sentences, seed 3,
    a log line for every update (`num_updates=N`) on stdout."""
    return [
        data,
        "--user-dir",
        PLUGIN,
        "--arch",
        "transformer_base",
        "--encoder-layers",
        2,
        "--decoder-layers",
        2,
        "--d-model",
        32,
        "--d-ff",
        64,
        "--heads",
        4,
        "--dropout",
        dropout,
        "--criterion",
        "paper_label_smoothed_ce",
        "--lr-scheduler",
        "noam",
        "--warmup-updates",
        50,
        "--optimizer",
        "paper_adam",
        "--cpu",
        "--batch-size",
        16,
        "--max-update",
        max_update,
        "--save-dir",
        save_dir,
        "--seed",
        3,
        "--log-format",
        "simple",
        "--log-interval",
        1,
        *extra,
    ]


def load(checkpoint: Path) -> dict:
    """A fairseq checkpoint through torch's safe unpickler (the plugin allow-lists fairseq's types)."""
    import attn_only_plugin  # noqa: F401

    return torch.load(checkpoint, weights_only=True)


def num_updates(state: dict) -> int:
    return state["optimizer_history"][-1]["num_updates"]


def free_port() -> int:
    """A TCP port nobody listens on now (the OS picks it when binding port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
