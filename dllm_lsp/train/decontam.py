"""Keep the evaluation data out of the corpus: any file that defines a benchmark function is dropped."""
from __future__ import annotations

import gzip
import json
from pathlib import Path


def benchmark_signatures(files: list[Path]) -> set[str]:
    """The `def name(...)` lines of every benchmark prompt (specific enough not to hit ordinary code)."""
    sigs: set[str] = set()
    for file in files:
        opener = gzip.open if str(file).endswith(".gz") else open
        with opener(file, "rt", encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                rec = json.loads(line)
                entry = rec.get("entry_point", "")
                for text_line in rec.get("prompt", "").splitlines():
                    s = text_line.strip()
                    if entry and s.startswith(f"def {entry}(") and len(s) > 12:
                        sigs.add(s)
    return sigs


def contaminated(text: str, signatures: set[str]) -> bool:
    if not signatures or "def " not in text:
        return False
    return any(s in text for s in signatures)
