"""`bench/environment.py`: every bench JSON names the code that measured (the package's version,
and its checkout's commit where there is one), and finding that out never fails or prints."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import dllm_lsp
from dllm_lsp.bench.environment import code_version, environment

CHECKOUT = Path(dllm_lsp.__file__).resolve().parents[1]


def test_the_environment_names_the_code():
    found = environment("cpu")["dllm_lsp"]
    assert found["version"] == dllm_lsp.__version__ and set(found) == {"version", "commit", "modified"}


@pytest.mark.skipif(shutil.which("git") is None or not (CHECKOUT / ".git").exists(), reason="not a git checkout")
def test_a_checkout_gives_its_commit_and_whether_it_was_modified():
    found = code_version.__wrapped__(CHECKOUT)
    head = subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert found["commit"] == head.strip() and re.fullmatch(r"[0-9a-f]{40}", found["commit"])
    assert isinstance(found["modified"], bool)


def test_no_checkout_no_git_or_a_broken_one_gives_no_commit_and_prints_nothing(tmp_path, monkeypatch, capfd):
    assert code_version.__wrapped__(tmp_path)["commit"] is None          # an installed package: no .git
    (tmp_path / ".git").mkdir()                                          # a .git git does not take
    assert code_version.__wrapped__(tmp_path) == {"version": dllm_lsp.__version__, "commit": None, "modified": None}
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))                  # no git at all
    assert code_version.__wrapped__(CHECKOUT)["commit"] is None
    assert capfd.readouterr() == ("", "")


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
def test_a_broken_checkout_inside_another_repository_does_not_take_its_commit(tmp_path):
    outer = tmp_path / "outer"
    (outer / "inner" / ".git").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(outer)], check=True)
    subprocess.run(["git", "-C", str(outer), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "outer"], check=True)
    assert code_version.__wrapped__(outer)["commit"]
    assert code_version.__wrapped__(outer / "inner")["commit"] is None
