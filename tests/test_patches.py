"""docs/install.md's table names every patch that importing the plugin makes, and nothing else:
attn_only_plugin.guards.wrap.PATCHES records each one as it is made."""

import json
import re
import subprocess
import sys

from helpers import ROOT

ROW = re.compile(r"^\| `([^`]+)` \| ([^|]+?) \|")
CLIS = ("fairseq-train", "fairseq-generate", "fairseq-interactive", "fairseq-hydra-train")


def documented() -> dict:
    """patched target -> when ("import" or the CLI), from the table of docs/install.md."""
    text = (ROOT / "docs" / "install.md").read_text()
    section = text[text.index("## What `--user-dir attn_only_plugin` changes in fairseq") :]
    rows = [ROW.match(line) for line in section.splitlines()]
    targets = [(m.group(1), m.group(2)) for m in rows if m]
    assert len(targets) == len(dict(targets)), "a patch listed twice"
    assert {when for _, when in targets} <= {"import", *CLIS}
    return dict(targets)


def test_every_patch_made_at_import_is_documented():
    """In this process (no fairseq CLI module loaded when the plugin was imported): every patch
    made is a row, and every row marked "import" was made."""
    from attn_only_plugin.guards.wrap import PATCHES

    docs = documented()
    assert not set(PATCHES) - set(docs), "patched but not in docs/install.md"
    at_import = {target for target, when in docs.items() if when == "import"}
    assert not at_import - set(PATCHES), "in docs/install.md as made at import, but not made"


def test_with_every_cli_loaded_the_patches_are_exactly_the_table():
    """A process that loaded the four CLIs' modules first, as each CLI does before --user-dir is
    imported: the patches made are exactly the table's rows."""
    code = (
        "import json, fairseq_cli.train, fairseq_cli.generate, fairseq_cli.interactive, fairseq_cli.hydra_train\n"
        "import attn_only_plugin\n"
        "from attn_only_plugin.guards.wrap import PATCHES\n"
        "print(json.dumps(PATCHES))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    made = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(made) == len(set(made))
    assert sorted(made) == sorted(documented())
