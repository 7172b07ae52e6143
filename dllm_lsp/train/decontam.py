"""Keep the evaluation data out of the corpus: any file that defines a benchmark function is dropped.

A benchmark function is recognised by its whole signature (name, parameters, annotations, return
type), compared without whitespace: a copy wrapped over several lines (black's style for long
signatures) or spaced otherwise is the same function. Every entry point counts, however short its
signature (`def f(n):` and `def tri(n):` were never checked); a file that happens to define a
function of the same name and parameters is dropped too, which costs the corpus little.
"""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

_DEF = re.compile(r"\bdef\s+(\w+)\s*\(")
_OPENERS, _CLOSERS = "([{", ")]}"


def header_at(text: str, start: int) -> str | None:
    """The function header beginning at `start` (`def name(...) -> T:`) up to its colon, without
    whitespace; None when it does not close (a file cut short)."""
    depth, seen_params = 0, False
    for i in range(start, min(len(text), start + 4000)):
        c = text[i]
        if c in _OPENERS:
            depth += 1
        elif c in _CLOSERS:
            depth -= 1
            seen_params = True
        elif c == ":" and depth == 0 and seen_params:
            return normal(text[start:i + 1])
    return None


def normal(header: str) -> str:
    """Whitespace out, and a trailing comma before the closing parenthesis (black adds one)."""
    return re.sub(r",\)", ")", "".join(header.split()))


def benchmark_signatures(files: list[Path]) -> set[str]:
    """The normalised headers of every benchmark prompt's entry point."""
    sigs: set[str] = set()
    for file in files:
        opener = gzip.open if str(file).endswith(".gz") else open
        with opener(file, "rt", encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                rec = json.loads(line)
                entry, prompt = rec.get("entry_point", ""), rec.get("prompt", "")
                for found in _DEF.finditer(prompt):
                    if found.group(1) == entry:
                        header = header_at(prompt, found.start())
                        if header is not None:
                            sigs.add(header)
    return sigs


def contaminated(text: str, signatures: set[str]) -> bool:
    if not signatures or "def" not in text:
        return False
    names = {sig[3:sig.index("(")] for sig in signatures}
    for found in _DEF.finditer(text):
        if found.group(1) not in names:
            continue
        header = header_at(text, found.start())
        if header is not None and header in signatures:
            return True
    return False
