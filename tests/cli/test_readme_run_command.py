"""The README's run command, with the shipped model, prints what the README says it prints, and the
README's other words about that file hold: a newcomer's first command cannot silently go stale
when the model, the planner or post-processing changes (it did once: token healing turned the
`(x)` it quoted into no completion at all)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def complete(location: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dllm_lsp", "complete", location, *flags], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_the_run_command_prints_what_the_readme_says():
    command = re.search(r"```sh\n(pip install [^\n]*dllm-lsp complete (\S+))\n```", README)
    assert command, "the README's first set-up command runs dllm-lsp complete"
    claimed = re.search(r"the run command above prints `([^`]*)`", README)
    assert claimed, "the README says what the run command prints"
    proc = complete(command.group(2))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip("\n") == claimed.group(1)


def test_the_readme_quotes_what_the_model_writes_where_nothing_is_shown():
    place = re.search(r"at\s+`[^`]*` in `\w+`, line (\d+), column (\d+), it writes `([^`]*)`", README)
    assert place, "the README quotes a place where the shipped model's guess is refused"
    line, col, written = place.groups()
    location = re.search(r"dllm-lsp complete (\S+?):\d+:\d+\n", README).group(1)
    reply = json.loads(complete(f"{location}:{line}:{col}", "--json").stdout)
    assert reply["completion"] == "" and "did not parse" in reply["reason"]
    assert reply["model_text"].strip() == written
