"""Install attn_only_plugin. The fairseq stack itself is installed by scripts/install.sh
(fairseq-fixed must be built with --no-deps; see docs/install.md)."""
from glob import glob

from setuptools import find_packages, setup

setup(
    name="attn_only_plugin",
    version="0.1.0",
    description='"Attention Is All You Need" (Vaswani et al. 2017) as a fairseq plugin',
    packages=find_packages(include=["attn_only_plugin", "attn_only_plugin.*"]),
    python_requires=">=3.10",
    # Deliberately not listing fairseq: pip would resolve fairseq's torchaudio requirement.
    install_requires=["torch>=2.0", "sentencepiece", "sacrebleu>=2.0", "hydra-core==1.3.2",
                      "omegaconf==2.3.0", "ctranslate2==4.8.5"],
    # scripts/*.py go on the venv PATH too (evalb.py, average_checkpoints.py, ...), with _standalone.py,
    # which the installed scripts that do not import fairseq load from beside them.
    scripts=sorted(glob("scripts/*.py")),
)
