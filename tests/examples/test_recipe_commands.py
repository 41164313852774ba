"""docs/recipes.md's full commands are what the paper's recipes run: each recipe
(examples/wmt14_*.sh through pipeline.sh) and each code block of "The commands, in full" are run
with stand-ins for the tools (python, fairseq-*, the package's console scripts) that record their
arguments and write the files the next step reads; the two lists of commands, paths written as
$WORK and $CORPUS, must be equal flag for flag."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pip's own copy of tomli
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "recipes.md"
RECIPES = {  # recipe -> (its data variable, target language)
    "wmt14_en_de_base.sh": ("WMT14_EN_DE", "de"),
    "wmt14_en_de_big.sh": ("WMT14_EN_DE", "de"),
    "wmt14_en_fr_big.sh": ("WMT14_EN_FR", "fr"),
}

# The stand-in: records [its name, *its arguments] as a line of JSON in $FAKE_LOG, then writes what
# the recipe's next step reads. What it does is chosen by the arguments, not the tool's name, so a
# script renamed to a console script (python scripts/x.py -> attn-only-x) needs no change here.
FAKE = """#!{python}
import json, os, sys
from pathlib import Path

name, args = os.path.basename(sys.argv[0]), sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps([name, *args]) + "\\n")
opt = lambda flag: args[args.index(flag) + 1]
if name == "fairseq-preprocess":
    Path(opt("--destdir")).mkdir(parents=True, exist_ok=True)
    Path(opt("--destdir"), "dict." + opt("--source-lang") + ".txt").write_text("")
elif name == "fairseq-train":  # the interval checkpoints fairseq keeps, epochs rising, and the last update's
    save, every = Path(opt("--save-dir")), int(opt("--save-interval-updates"))
    save.mkdir(parents=True, exist_ok=True)
    updates = range(every, int(opt("--max-update")) + 1, every)
    for epoch, update in list(enumerate(updates, 1))[-int(opt("--keep-interval-updates")):]:
        (save / f"checkpoint_{{epoch}}_{{update}}.pt").write_text(str(update))
    (save / "checkpoint_last.pt").write_text(opt("--max-update"))
elif name == "fairseq-generate":
    print("S-1\\tzwei\\nH-1\\t-0.2\\tzwei\\nS-0\\teins\\nH-0\\t-0.1\\teins")
elif "--list-last" in args:  # which checkpoints to average: the package's own rule, on the files above
    from attn_only_plugin.cli.average_checkpoints import last_checkpoints

    print(*last_checkpoints(Path(args[-1]), int(opt("--list-last"))), sep="\\n")
elif "--inputs" in args:  # averaging
    Path(opt("--output")).write_text("average")
elif "--output" in args:  # the hypotheses of a generate log
    Path(opt("--output")).write_text("eins\\nzwei\\n")
else:  # scores
    print("BLEU = 1.0")
"""


def console_scripts():
    """The names pyproject.toml installs as console scripts (stand-ins for them too)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project.get("scripts", {}))


def fake_venv(tmp_path):
    """tmp/venv/bin: a stand-in for python, the fairseq CLIs and every console script."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ["python", "fairseq-preprocess", "fairseq-train", "fairseq-generate", *console_scripts()]:
        (bin_dir / name).write_text(FAKE.format(python=sys.executable))
        (bin_dir / name).chmod(0o755)
    return bin_dir


def corpus(tmp_path, tgt):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for split in ("train", "valid", "test"):
        (folder / f"{split}.en").write_text("one\ntwo\n")
        (folder / f"{split}.{tgt}").write_text("eins\nzwei\n")
    return folder


def recorded(log: Path, work: str, corpus_dir: str, cwd: Path):
    """The commands in LOG with paths as the docs write them: $WORK, $CORPUS, the repository's own
    files relative to its root; the recipe's data-bin.tmp (renamed data-bin once complete) as data-bin."""

    def path(arg):
        for value, name in ((work, "$WORK"), (corpus_dir, "$CORPUS"), (f"{ROOT}/", ""), (f"{cwd}/", "")):
            if arg == value or arg.startswith(value + ("" if value.endswith("/") else "/")):
                arg = name + arg[len(value) :]
                break
        return "$WORK/data-bin" if arg == "$WORK/data-bin.tmp" else arg

    return [[path(arg) for arg in json.loads(line)] for line in log.read_text().splitlines()]


def docs_block(script):
    """The bash block under docs/recipes.md's heading that names SCRIPT (the first one after it)."""
    text = DOCS.read_text()
    heading = re.search(rf"^### [^\n]*`examples/{re.escape(script)}`\n", text, re.M)
    assert heading, f"docs/recipes.md has no heading naming examples/{script}"
    block = re.compile(r"^```bash\n(.*?)^```", re.S | re.M).search(text, heading.end())
    assert block and not re.search(r"^##", text[heading.end() : block.start()], re.M), (
        f"no bash block under the heading of examples/{script}"
    )
    return block.group(1)


def run_recipe(tmp_path, script):
    variable, tgt = RECIPES[script]
    bin_dir, data, work = fake_venv(tmp_path), corpus(tmp_path, tgt), tmp_path / "work"
    log = tmp_path / "recipe.log"
    env = dict(os.environ, VENV=str(bin_dir.parent), FAKE_LOG=str(log), WORK=str(work), GPUS="8")
    env.update({variable: str(data)})
    env.pop("MAX_TOKENS", None)
    proc = subprocess.run(
        ["bash", str(ROOT / "examples" / script)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return recorded(log, str(work), str(data), ROOT)


def run_docs(tmp_path, script):
    """The block run as a reader would paste it, from a folder standing in for the repository's root,
    its CORPUS folder made where the block says (under that folder) with the same tiny corpus."""
    block = docs_block(script)
    exported = re.search(r"^export CORPUS=(\S+) WORK=(\S+)$", block, re.M)
    assert exported, "the block starts by setting CORPUS and WORK"
    corpus_dir, work = exported.groups()
    cwd = tmp_path / "docs"
    cwd.mkdir(parents=True)
    inside = cwd / corpus_dir.lstrip("/")
    inside.parent.mkdir(parents=True)
    corpus(tmp_path, RECIPES[script][1]).rename(inside)
    block = block.replace(f"CORPUS={corpus_dir} ", f"CORPUS={inside} ", 1)
    bin_dir = fake_venv(tmp_path / "docs-env")
    log = tmp_path / "docs.log"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_LOG=str(log))
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return recorded(log, work, str(inside), cwd)


@pytest.mark.parametrize("script", list(RECIPES))
def test_the_docs_print_the_commands_the_recipe_runs(tmp_path, script):
    ours = run_recipe(tmp_path / "recipe", script)
    printed = run_docs(tmp_path / "printed", script)
    # data (2), training, which checkpoints, average, generate, its hypotheses, sacreBLEU, the paper's BLEU
    assert len(ours) == 9, ours
    assert [command[0] for command in ours if command[0].startswith("fairseq-")] == [
        "fairseq-preprocess",
        "fairseq-train",
        "fairseq-generate",
    ]
    for got, want in zip(printed, ours, strict=False):  # the first command that differs, in full
        assert got == want, (
            f"docs/recipes.md prints\n  {shlex.join(got)}\nwhere examples/{script} runs\n  {shlex.join(want)}"
        )
    assert len(printed) == len(ours), (printed, ours)
    train = next(command for command in ours if command[0] == "fairseq-train")
    average = next(command for command in ours if "--inputs" in command)
    inputs = average[average.index("--inputs") + 1 : average.index("--output")]
    keep = int(train[train.index("--keep-interval-updates") + 1])
    assert len(inputs) == keep and inputs[-1] == "$WORK/checkpoints/checkpoint_last.pt", inputs  # the last N


@pytest.mark.parametrize("gpus, update_freq", [(1, 7), (2, 4), (4, 2), (8, 1)])
def test_update_freq_per_gpu_count_as_the_docs_table(gpus, update_freq):
    """docs/recipes.md's GPUS -> --update-freq table is what pipeline.sh's update_freq gives."""
    table = re.search(
        r"^\| GPUS \(with `--max-tokens 4096`\) \|(.*)\n\|[-|]+\n\| `--update-freq` \|(.*)$", DOCS.read_text(), re.M
    )
    assert table, "docs/recipes.md has no GPUS / --update-freq table"
    documented = dict(zip(table.group(1).split("|"), table.group(2).split("|"), strict=True))
    assert int(documented[f" {gpus} "]) == update_freq
    proc = subprocess.run(
        ["bash", "-c", f'source "{ROOT}/examples/pipeline.sh" && update_freq {gpus} 4096'],
        capture_output=True,
        text=True,
    )
    assert proc.stdout.strip() == str(update_freq), proc.stderr
