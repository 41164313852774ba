"""Data-parallel training through fairseq on CPU: 2 processes (gloo) give the same model as one
process with --update-freq 2 on the same data.

Why the two see the same batches: fairseq builds one list of batches (fixed --batch-size 16, order
seeded by --seed) and then either deals it out round-robin to the ranks (ShardedIterator: rank r
gets batches r, r + 2, ...) or, in one process, groups consecutive batches by update_freq
(GroupedIterator: [0, 1], [2, 3], ...); update k uses batches 2k and 2k + 1 either way. When an epoch
has an odd number of batches (13 here), rank 1 gets an empty dummy batch and the single process a
group of one. Gradients are summed (all-reduce, or accumulation) and divided by the total number of
target tokens in both cases. With --dropout 0 nothing else differs.

fairseq's default launch paths assume GPUs on a CPU-only machine; what runs is one process per rank,
either started by hand (--distributed-rank R --distributed-init-method tcp://... --distributed-no-spawn)
or by torchrun (made to work without CUDA by fairseq_fixes item 5), with --distributed-backend gloo
and --ddp-backend legacy_ddp (pytorch_ddp passes GPU device ids to DistributedDataParallel).
"""

import re
import subprocess

import pytest

from helpers import BIN, ENV, ROOT, TIMEOUT, free_port, load, num_updates, run, toy_data, train_args

MAX_UPDATE = 10  # 7 updates make an epoch (13 batches, 2 a step): the run crosses into epoch 2
CPU_DDP = ["--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp"]
STEP = re.compile(r"wpb=([\d.]+), bsz=(\d+), num_updates=(\d+),")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return toy_data(tmp_path_factory.mktemp("distributed"))


def args(data, save_dir, *extra):
    return train_args(data, save_dir, MAX_UPDATE, 0.0, "--no-epoch-checkpoints", *extra)


@pytest.fixture(scope="module")
def single(data, tmp_path_factory):
    """The reference: one process accumulating 2 batches per update. Returns (save dir, log)."""
    save = tmp_path_factory.mktemp("single")
    return save, run(BIN / "fairseq-train", *args(data, save, "--update-freq", 2)).stdout


def steps(log: str):
    """(target tokens, sentences) of every update, as rank 0 or the single process logs them."""
    return [(float(wpb), int(bsz), int(n)) for wpb, bsz, n in STEP.findall(log)]


def assert_same_training(reference, distributed):
    """Same batches at every update, and final parameters equal to 1e-6 (in practice bit-identical:
    a sum of two gradients is the same whichever order gloo adds them in)."""
    (ref_dir, ref_log), (dist_dir, dist_log) = reference, distributed
    assert [s[2] for s in steps(ref_log)] == list(range(1, MAX_UPDATE + 1)), ref_log[-3000:]
    assert steps(dist_log) == steps(ref_log), dist_log[-3000:]
    expected, got = load(ref_dir / "checkpoint_last.pt"), load(dist_dir / "checkpoint_last.pt")
    assert num_updates(expected) == num_updates(got) == MAX_UPDATE
    assert expected["model"].keys() == got["model"].keys()
    worst = max((expected["model"][k] - got["model"][k]).abs().max().item() for k in expected["model"])
    print(f"largest parameter difference: {worst:g}")
    assert worst <= 1e-6


def start_ranks(cmds, logs):
    """Start one process per command, each writing its output to its log file; wait for all. A rank
    that fails would leave the others waiting for it in gloo, so they are ended too."""
    procs = []
    try:
        for cmd, log in zip(cmds, logs, strict=True):
            with open(log, "w") as out:
                procs.append(
                    subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=ENV)
                )
        for proc in procs:
            proc.wait(timeout=TIMEOUT)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, log in zip(procs, logs, strict=True):
        assert proc.returncode == 0, f"{log.name} failed ({proc.returncode}):\n{log.read_text()[-3000:]}"
    return [log.read_text() for log in logs]


def test_two_gloo_processes_started_by_hand_equal_update_freq_2(data, single, tmp_path):
    """The documented CPU launch: one fairseq-train per rank, rendezvous over TCP on a free port."""
    save, init = tmp_path / "ckpt", f"tcp://127.0.0.1:{free_port()}"
    cmds = [
        [
            BIN / "fairseq-train",
            *args(
                data,
                save,
                *CPU_DDP,
                "--distributed-world-size",
                2,
                "--distributed-rank",
                rank,
                "--distributed-init-method",
                init,
                "--distributed-no-spawn",
            ),
        ]
        for rank in range(2)
    ]
    rank0, rank1 = start_ranks(cmds, [tmp_path / "rank0.log", tmp_path / "rank1.log"])
    assert "distributed init (rank 1)" in rank1
    assert_same_training(single, (save, rank0))


def test_torchrun_on_cpu_equals_update_freq_2(data, single, tmp_path):
    """torchrun --nproc-per-node 2 without --distributed-world-size: world size and rank come from
    torchrun's environment (fairseq alone divides by the CUDA device count and fails)."""
    save = tmp_path / "ckpt"
    cmd = [
        BIN / "torchrun",
        "--nproc-per-node",
        2,
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        free_port(),
        BIN / "fairseq-train",
        *args(data, save, *CPU_DDP),
    ]
    (log,) = start_ranks([cmd], [tmp_path / "torchrun.log"])
    assert "distributed init (rank 1): env://" in log
    assert_same_training(single, (save, log))


def test_the_process_group_is_destroyed_at_exit(monkeypatch):
    """fairseq_fixes 13: fairseq's distributed_init, as patched, registers the destruction of the
    group it made for the exit; run here in this process on a one-rank gloo group."""
    import atexit

    import torch.distributed as dist
    from fairseq.distributed import utils as distributed_utils

    from attn_only_plugin import fairseq_fixes

    registered = []
    monkeypatch.setattr(atexit, "register", registered.append)
    init = f"tcp://127.0.0.1:{free_port()}"
    assert distributed_utils.distributed_init.__name__ == "distributed_init"  # fairseq's, wrapped at import
    one_rank = fairseq_fixes._destroy_group_at_exit(
        lambda cfg: dist.init_process_group("gloo", init, world_size=1, rank=0) or 0
    )
    assert one_rank(None) == 0 and dist.is_initialized()
    assert registered == [fairseq_fixes.destroy_process_group]
    assert fairseq_fixes.destroy_process_group() and not dist.is_initialized()
    assert not fairseq_fixes.destroy_process_group()  # nothing left to destroy
