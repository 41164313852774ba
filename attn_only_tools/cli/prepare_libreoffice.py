"""Build an EN-DE (or EN-FR) parallel corpus from Debian's LibreOffice help (MPL-2.0): the
English and German (or French) help pages aligned paragraph by paragraph, cleaned, de-duplicated
and split into train / valid / test by help file, optionally with the compact subset that the
quickstart uses (examples/data/libreoffice_en_de).

    attn-only-prepare-libreoffice --lang de --workdir /tmp/lo --out work/libreoffice_en_de
    attn-only-prepare-libreoffice --lang de --workdir /tmp/lo --out work/libreoffice_en_de \\
        --subset-out examples/data/libreoffice_en_de      # also the committed compact subset

Fetches libreoffice-help-en-us and libreoffice-help-<lang> with `apt-get download` (or takes the
.deb files from --debs-dir), unpacks them with `dpkg-deb -x`, and aligns, cleans, de-duplicates
and splits by help file with attn_only_tools/data/libreoffice.py. Run once by a maintainer; the
quickstart uses the committed subset and needs none of this. Failures print one `error: ...` line
and exit 1 without writing a corpus.
"""

import functools
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from attn_only_tools.data import libreoffice
from attn_only_tools.guards.errors import PluginError

from . import command_parser

MPL_URL = "https://mozilla.org/MPL/2.0/"


def log(message: str) -> None:
    print(f"[libreoffice] {message}", file=sys.stderr)


def _run(cmd, **kwargs) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise PluginError(f"{' '.join(map(str, cmd))} failed: {last}")
    return proc.stdout.strip()


def _newer(a: str, b: str) -> int:
    return -1 if subprocess.run(["dpkg", "--compare-versions", a, "lt", b]).returncode == 0 else 1


def fetch(package: str, workdir: Path, debs_dir: Path = None):
    """(unpacked folder, version) of `package`: the newest <package>_*.deb in debs_dir, or one
    downloaded into workdir with apt-get; unpacked once into workdir/<package>_<version>."""
    where = debs_dir or workdir
    debs = sorted(where.glob(f"{package}_*.deb"))
    if not debs and debs_dir is None:
        log(f"apt-get download {package}")
        _run(["apt-get", "download", package], cwd=workdir)
        debs = sorted(workdir.glob(f"{package}_*.deb"))
    if not debs:
        raise PluginError(f"no {package}_*.deb in {where}")
    versions = {deb: _run(["dpkg-deb", "-f", str(deb), "Version"]) for deb in debs}
    deb = max(debs, key=functools.cmp_to_key(lambda a, b: _newer(versions[a], versions[b])))
    version = versions[deb]
    target = workdir / f"{package}_{version.replace(':', '%3a')}"
    if not target.is_dir():
        log(f"unpacking {deb.name}")
        tmp = Path(tempfile.mkdtemp(dir=workdir, prefix=f".{package}."))
        try:
            _run(["dpkg-deb", "-x", str(deb), str(tmp)])
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target, version


def prepare(
    lang: str,
    workdir: Path,
    out: Path,
    debs_dir: Path = None,
    subset_out: Path = None,
    subset_sizes=(20000, 500, 500),
    subset_max_words: int = 40,
):
    """Builds the full corpus in `out` (and the compact subset in `subset_out`); returns
    {"full": counts, "subset": counts or None, "versions": {package: version}}."""
    lib = libreoffice
    if debs_dir is not None and not debs_dir.is_dir():
        raise PluginError(f"--debs-dir {debs_dir} is not a directory")
    for tool in ["dpkg-deb", "dpkg"] + ([] if debs_dir else ["apt-get"]):
        if shutil.which(tool) is None:
            hint = " (or pass --debs-dir)" if tool == "apt-get" else ""
            raise PluginError(f"{tool} not found: this needs Debian's package tools{hint}")
    workdir.mkdir(parents=True, exist_ok=True)
    roots, versions = {}, {}
    for code in ("en", lang):
        package = "libreoffice-help-" + ("en-us" if code == "en" else code)
        unpacked, versions[package] = fetch(package, workdir, debs_dir)
        try:
            roots[code] = lib.find_help_root(unpacked, code)
        except FileNotFoundError as e:
            raise PluginError(f"{e}: is {package} a LibreOffice help package?") from None
    log(f"aligning {roots['en']} with {roots[lang]}")
    splits = lib.build_splits(lib.align(roots["en"], roots[lang]))
    if not all(splits.values()):
        raise PluginError(f"empty split(s) {[s for s, p in splits.items() if not p]}: nothing aligned?")
    result = {"full": lib.write_corpus(splits, out, "en", lang), "subset": None, "versions": versions}
    log(f"EN-{lang.upper()} {out}: " + ", ".join(f"{s} {n}" for s, n in result["full"].items()))
    if subset_out is not None:
        subset = lib.make_subset(splits, *subset_sizes, max_words=subset_max_words)
        result["subset"] = lib.write_corpus(subset, subset_out, "en", lang)
        _copy_licence(workdir, versions, subset_out)
        log(f"subset {subset_out}: " + ", ".join(f"{s} {n}" for s, n in result["subset"].items()))
    return result


def _copy_licence(workdir: Path, versions, subset_out: Path) -> None:
    """Puts the English package's Debian copyright file (COPYRIGHT.debian) and the MPL-2.0 text
    (LICENSE, from /usr/share/common-licenses, else the short notice with its URL) next to the subset."""
    package = "libreoffice-help-en-us"
    unpacked = workdir / f"{package}_{versions[package].replace(':', '%3a')}"
    copyright_file = unpacked / "usr" / "share" / "doc" / package / "copyright"
    if copyright_file.is_file():
        shutil.copyfile(copyright_file, subset_out / "COPYRIGHT.debian")
    mpl = Path("/usr/share/common-licenses/MPL-2.0")
    text = (
        mpl.read_text(encoding="utf-8")
        if mpl.is_file()
        else (
            "Mozilla Public License Version 2.0\n\nThis Source Code Form is subject to the terms of the "
            "Mozilla Public License, v. 2.0. If a copy of the MPL was not distributed with this file, "
            f"You can obtain one at {MPL_URL}.\n"
        )
    )
    (subset_out / "LICENSE").write_text(text, encoding="utf-8")


def main(argv=None) -> int:
    p = command_parser(__doc__)
    p.add_argument("--lang", choices=["de", "fr"], default="de", help="target language (source is en)")
    p.add_argument("--workdir", type=Path, required=True, help="where .debs are downloaded and unpacked")
    p.add_argument("--debs-dir", type=Path, help="take the .deb files from here instead of apt-get")
    p.add_argument("--out", type=Path, required=True, help="full corpus: {train,valid,test}.{en,LANG}")
    p.add_argument("--subset-out", type=Path, help="also write the compact subset (and licence) here")
    p.add_argument("--subset-train", type=int, default=20000)
    p.add_argument("--subset-valid", type=int, default=500)
    p.add_argument("--subset-test", type=int, default=500)
    p.add_argument("--subset-max-words", type=int, default=40, help="longest subset sentence, in words")
    a = p.parse_args(argv)
    try:
        result = prepare(
            a.lang,
            a.workdir,
            a.out,
            a.debs_dir,
            a.subset_out,
            (a.subset_train, a.subset_valid, a.subset_test),
            a.subset_max_words,
        )
    except (PluginError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for package, version in result["versions"].items():
        print(f"{package} {version}")
    for name in ("full", "subset"):
        if result[name]:
            print(f"{name}: " + " ".join(f"{s}={n}" for s, n in result[name].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
