"""What README.md and docs/*.md point at exists: relative links and their `#anchors`, the files
they cite by path, and the flags of the `dllm-lsp` command lines they quote.

These rot without anyone noticing: a heading that quotes a command's flags is its anchor, so a
flag added to the heading broke two links to it (`cli.md#dllm-lsp-bench---runs-n---json-...`),
and a renamed flag or results file leaves a reader a command that fails or a figure with no
source. The checks read the docs as text and the parsers' own `--help`: no model is loaded.
"""
from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from dllm_lsp import cli

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

FENCE = re.compile(r"^```.*?^```[^\n]*$", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)
# A path a page cites as a file of this repository, in backticks (`docs/results/x.json`).
CITED = re.compile(r"`((?:docs|models|tests|dllm_lsp|kernels|editors|examples|\.ci)/[^`\s:]+)`")
# Named as the place where figures still owed are to be committed, not as a source.
NOT_YET_WRITTEN = {"docs/results/decode-options/"}


def without_fences(text: str) -> str:
    """The page with its fenced code blocks blanked out, line numbers kept."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link targets dropped, lower case, every character that is
    not a letter, digit, space, hyphen or underscore removed, spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for match in HEADING.finditer(without_fences(page.read_text(encoding="utf-8"))):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")   # GitHub numbers repeated headings
    return found


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def test_slug_follows_githubs_rules():
    assert slug("`dllm-lsp bench [--runs N] [--also-steps N[,M]]`") == "dllm-lsp-bench---runs-n---also-steps-nm"
    assert slug("GPU recipe: one H100 / H200") == "gpu-recipe-one-h100--h200"
    assert slug("Options (`initializationOptions`, or `workspace/didChangeConfiguration` under `dllm`)") == \
        "options-initializationoptions-or-workspacedidchangeconfiguration-under-dllm"


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in PAGES:
        text = without_fences(page.read_text(encoding="utf-8"))
        for match in LINK.finditer(text):
            target = match.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):    # https:, mailto:: not ours to check
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(REPO)}:{line_of(text, match.start())}: {target}"
            if not resolved.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{where} (no such heading in {resolved.relative_to(REPO)})")
    assert not broken, "\n".join(broken)


def test_every_cited_repository_path_exists():
    missing = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in CITED.finditer(text):
            cited = match.group(1)
            if any(mark in cited for mark in ("...", "*", "<", "{", "NAME", "DIR")) or cited in NOT_YET_WRITTEN:
                continue   # a pattern or a placeholder, not one file
            if not (REPO / cited).exists():
                missing.append(f"{page.relative_to(REPO)}:{line_of(text, match.start())}: {cited}")
    assert not missing, "\n".join(missing)


# --- command lines -----------------------------------------------------------------------------

# The subcommands that take a mode word, with their modes.
MODES = {"bench": sorted(cli.BENCH_MODES), "train": ["corpus", "tokenizer", "model", "all", "card"],
         "eval": ["humaneval-infilling"], "gpujob": ["run", "wait", "stage", "unpack"],
         "ray": ["deploy", "status", "delete"]}
COMMANDS = ["serve", "complete", "infill", *MODES]


def help_flags(*words: str) -> set[str] | None:
    """The flags `dllm-lsp WORDS --help` lists, read in this process; None where the command
    cannot run here (`ray` without its optional extra)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            cli.main([*words, "--help"])
        except SystemExit as exc:
            if exc.code not in (0, None):
                return None
        else:
            return None     # answered without help: an optional dependency is missing
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", out.getvalue()))


@pytest.fixture(scope="module")
def flags() -> dict[tuple[str, ...], set[str] | None]:
    table: dict[tuple[str, ...], set[str] | None] = {}
    for command in COMMANDS:
        if command not in MODES or command == "bench":   # bare `bench` is the latency benchmark
            table[(command,)] = help_flags(command)
        for mode in MODES.get(command, []):
            table[(command, mode)] = help_flags(command, mode)
    return table


# The command as the pages spell it: the script, or the package run as a module (the GPU job's calls).
PROGRAM = r"(?:dllm-lsp|python3? -m dllm_lsp)"


def quoted_commands(text: str):
    """(line, words, flags) of each `dllm-lsp ...` (or `python -m dllm_lsp ...`) command quoted in inline code or a code block."""
    lines = []
    for block in re.finditer(r"```[^\n]*\n(.*?)```", text, re.S):   # one command a line, `\` continues it
        lines += [(line_of(text, block.start()), line)
                  for line in re.sub(r"\\\n", " ", block.group(1)).splitlines()]
    # inline code may wrap across the page's lines (blanking the fences keeps the line numbers)
    prose = without_fences(text)
    lines += [(line_of(prose, m.start()), m.group(1).replace("\n", " "))
              for m in re.finditer(r"(?<!`)`([^`]+)`(?!`)", prose)]
    for number, line in lines:
        for match in re.finditer(rf"{PROGRAM}\s+([a-z][a-z-]*)((?:(?!{PROGRAM}\s).)*)", line):
            command, rest = match.group(1), match.group(2)
            # what follows a shell pipe, `;`, `&&` or a comment is another command's
            rest = re.split(r"\|\s+(?!-)|;|&&|\s#\s", rest)[0]
            # quoted values (`--serve-variant "own=--context-pass own"`) hold another command's flags
            rest = re.sub(r"\"(?:[^\"\\]|\\.)*\"|'[^']*'", "", rest)
            words = [command]
            first = re.match(r"\s+([a-z][a-z-]*)", rest)
            if command in MODES and first and first.group(1) in MODES[command]:
                words.append(first.group(1))
            yield number, tuple(words), re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", rest)


def test_every_quoted_command_line_uses_flags_its_command_has(flags):
    wrong = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for number, words, used in quoted_commands(text):
            if words[0] not in COMMANDS:
                wrong.append(f"{page.relative_to(REPO)}:{number}: no command `dllm-lsp {words[0]}`")
                continue
            if len(words) == 1 and words[0] in MODES and words[0] != "bench":
                # `dllm-lsp eval ... --steps N`: the mode is left out, any of its modes' flags
                readable = [flags[(words[0], mode)] for mode in MODES[words[0]] if flags[(words[0], mode)] is not None]
                if not readable:
                    continue
                known = set().union(*readable)
            elif flags[words] is None:
                continue
            else:
                known = flags[words]
            wrong += [f"{page.relative_to(REPO)}:{number}: `dllm-lsp {' '.join(words)}` has no {flag}"
                      for flag in used if flag not in known and flag not in ("--help", "--version")]
    assert not wrong, "\n".join(wrong)
