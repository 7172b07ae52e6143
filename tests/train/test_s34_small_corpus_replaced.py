"""`dllm-lsp train corpus` over an existing corpus: the new one is written beside the folder and
renamed into place once whole (train/folder.py). It rewrote train.jsonl and val.jsonl in place,
so a rebuild stopped halfway (Ctrl-C; SIGTERM, the GPU job's time box) left half a corpus that the
next `train` read as whole. Now the old corpus is left as it was, byte for byte, when a rebuild is
interrupted or refused, and nothing half-written is left beside it."""
import os
import random
import string
import subprocess
import sys
from pathlib import Path

import pytest

from dllm_lsp.train.cli import main
from dllm_lsp.train.corpus import CorpusOptions, build_corpus, iter_records

# A rebuild interrupted by a real signal at a known point: its first progress line, logged once
# 2,000 files are in (the sources are 2,100 files, all kept), which is mid-build.
CHILD = r'''
import os, signal, sys
from pathlib import Path
from dllm_lsp.train.corpus import CorpusOptions, build_corpus

source, out, name = sys.argv[1:]
signal.signal(signal.SIGINT, signal.default_int_handler)    # as in a terminal, even if started with it ignored
signal.signal(signal.SIGTERM, signal.SIG_DFL)

def log(message):
    print(message, flush=True)
    os.kill(os.getpid(), getattr(signal, name))

build_corpus(CorpusOptions(folders=[Path(source)], assume_license="MIT", workers=1), Path(out), log=log)
print("build finished", flush=True)
'''

CORPUS = ("train.jsonl", "val.jsonl", "stats.json")


def write_sources(folder: Path, count: int, seed: int) -> Path:
    """`count` Python files, each of words of its own (so none is a near-duplicate of another)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    for i in range(count):
        names = ["".join(rng.choice(string.ascii_lowercase) for _ in range(8)) for _ in range(10)]
        text = "".join(f"def {a}(value, {b}=1):\n    return value * {b} + len({a!r})\n\n"
                       for a, b in zip(names[::2], names[1::2]))
        (folder / f"m{i:05d}.py").write_text(text)
    return folder


def snapshot(corpus: Path) -> dict[str, bytes]:
    return {name: (corpus / name).read_bytes() for name in (*CORPUS, "NOTES.md")}


def nothing_beside(corpus: Path) -> list[str]:
    return sorted(p.name for p in corpus.parent.iterdir() if p.name.startswith(f".{corpus.name}."))


@pytest.fixture
def old_corpus(tmp_path) -> Path:
    """A corpus built before, with a file of the user's beside its own."""
    corpus = tmp_path / "corpus"
    build_corpus(CorpusOptions(folders=[write_sources(tmp_path / "old-src", 40, seed=1)], assume_license="MIT",
                               workers=1, val_percent=10), corpus, log=lambda message: None)
    (corpus / "NOTES.md").write_text("built from old-src\n")
    return corpus


@pytest.mark.timeout(300)
@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_a_rebuild_interrupted_halfway_leaves_the_old_corpus_whole(tmp_path, old_corpus, signal_name):
    before = snapshot(old_corpus)
    kept = sum(1 for _ in iter_records(old_corpus, "train"))
    source = write_sources(tmp_path / "new-src", 2100, seed=2)
    child = subprocess.run([sys.executable, "-c", CHILD, str(source), str(old_corpus), signal_name],
                           capture_output=True, text=True, timeout=240)
    output = child.stdout + child.stderr
    assert "corpus: 2000/2100 files seen" in output and "build finished" not in output, output[-3000:]
    assert child.returncode != 0, output[-3000:]
    # It had truncated train.jsonl and val.jsonl at the start and written 2,000 files' worth of
    # records into them: a corpus of half the new sources, and no old one.
    assert snapshot(old_corpus) == before
    assert sum(1 for _ in iter_records(old_corpus, "train")) == kept
    assert nothing_beside(old_corpus) == []          # the half-written new one is removed


def test_a_whole_rebuild_replaces_the_corpus_and_keeps_the_users_files(tmp_path, old_corpus):
    before = snapshot(old_corpus)
    result = build_corpus(CorpusOptions(folders=[write_sources(tmp_path / "new-src", 30, seed=3)],
                                        assume_license="MIT", workers=1, val_percent=10), old_corpus,
                          log=lambda message: None)
    after = snapshot(old_corpus)
    assert after["NOTES.md"] == before["NOTES.md"]
    assert all(after[name] != before[name] for name in CORPUS)
    paths = [r["path"] for split in ("train", "val") for r in iter_records(old_corpus, split)]
    assert len(paths) == result["train"]["files"] + result["val"]["files"] == 30
    assert all("/new-src/" in path for path in paths)
    assert nothing_beside(old_corpus) == []


def test_a_refused_rebuild_leaves_the_old_corpus_as_it_was(tmp_path, old_corpus, capsys):
    before = snapshot(old_corpus)
    plain = write_sources(tmp_path / "unlicensed", 3, seed=4)
    assert main(["corpus", "--out", str(old_corpus), "--folder", str(plain)]) != 0
    assert "assume-license" in capsys.readouterr().err
    assert main(["corpus", "--out", str(old_corpus), "--folder", str(plain), "--assume-license", "MIT",
                 "--val-percent", "100"]) != 0
    assert snapshot(old_corpus) == before and nothing_beside(old_corpus) == []


def test_the_corpus_workers_do_not_import_torch():
    """Each spawned worker imports the corpus module (and so train/folder.py, whose helpers replace
    the folder): torch there cost every worker its import."""
    probe = subprocess.run([sys.executable, "-c", "import sys, dllm_lsp.train.corpus; print('torch' in sys.modules)"],
                           capture_output=True, text=True, timeout=120, env={**os.environ})
    assert probe.returncode == 0 and probe.stdout.strip() == "False", probe.stdout + probe.stderr
