"""Decide whether a distribution's license is permissive, from its packaging metadata.

Only permissively licensed code enters the corpus. The metadata is free text in practice
("MIT license", "Apache 2.0", an SPDX expression, trove classifiers), so each source is
normalised to an SPDX-like id; anything not recognised is treated as not permissive.
"""
from __future__ import annotations

import re

PERMISSIVE = {
    "MIT", "MIT-0", "BSD-2-Clause", "BSD-3-Clause", "0BSD", "Apache-2.0", "PSF-2.0", "Python-2.0",
    "ISC", "Unlicense", "CC0-1.0", "Zlib", "BSL-1.0", "HPND", "CNRI-Python", "BlueOak-1.0.0",
}

# Lower-cased free-text fragments -> SPDX id, checked in order (most specific first).
_TEXT_PATTERNS = [
    (r"\bmit[- ]0\b", "MIT-0"),
    (r"\bmit\b|expat", "MIT"),
    (r"0bsd|zero-clause bsd", "0BSD"),
    (r"bsd[- ]?2|2-clause|simplified bsd|freebsd", "BSD-2-Clause"),
    (r"bsd[- ]?3|3-clause|new bsd|modified bsd|revised bsd", "BSD-3-Clause"),
    (r"\bbsd\b", "BSD-3-Clause"),
    (r"apache|\basl ?2", "Apache-2.0"),
    (r"\bpsf\b|python software foundation", "PSF-2.0"),
    (r"\bisc\b|iscl", "ISC"),
    (r"unlicense", "Unlicense"),
    (r"cc0|public domain", "CC0-1.0"),
    (r"zlib", "Zlib"),
    (r"boost|bsl-1", "BSL-1.0"),
    (r"\bhpnd\b|historical permission", "HPND"),
]
# npm's "UNLICENSED" means "no license granted" (unlike "Unlicense"); "SEE LICENSE IN" is unknowable.
_COPYLEFT = re.compile(
    r"\b(a?gpl|lgpl|mpl|mozilla|eupl|cddl|epl|eclipse|sspl|proprietary|commercial|unlicensed|see license)\b", re.IGNORECASE
)


def from_text(text: str | None) -> str | None:
    """One license string (a name, not an expression) -> SPDX id, or None if unknown/non-permissive."""
    if not text:
        return None
    low = text.strip().lower()
    if _COPYLEFT.search(low):
        return None
    for pattern, spdx in _TEXT_PATTERNS:
        if re.search(pattern, low):
            return spdx
    return None


def from_expression(expr: str) -> str | None:
    """An SPDX expression ("MIT OR Apache-2.0", "Apache-2.0 AND CNRI-Python") -> a permissive id or None.

    OR: permissive if any branch is; AND: only if every part is. "WITH <exception>" keeps the base.
    """
    expr = expr.strip().strip("()")
    if not expr:
        return None
    if re.search(r"\s+OR\s+", expr):
        for part in re.split(r"\s+OR\s+", expr):
            got = from_expression(part)
            if got:
                return got
        return None
    if re.search(r"\s+AND\s+", expr):
        parts = [from_expression(p) for p in re.split(r"\s+AND\s+", expr)]
        return " AND ".join(parts) if all(parts) else None
    base = re.split(r"\s+WITH\s+", expr)[0].strip().strip("()")
    if base in PERMISSIVE:
        return base
    return from_text(base)


def from_classifiers(classifiers: list[str]) -> str | None:
    found = [from_text(c.split("::")[-1]) for c in classifiers if c.startswith("License ::")]
    permissive = [f for f in found if f]
    # A classifier list naming a copyleft license next to a permissive one is ambiguous: skip it.
    if permissive and len(permissive) == len(found):
        return permissive[0]
    return None


def classify(expression: str | None, license_field: str | None, classifiers: list[str]) -> str | None:
    """The permissive license of a distribution, or None when it is not (or cannot be told)."""
    if expression:
        return from_expression(expression)
    field = (license_field or "").strip()
    # Some packages paste the whole license text here; its first line names it well enough.
    first_line = field.splitlines()[0] if field else ""
    if first_line and first_line.upper() not in ("UNKNOWN", "NONE", ""):
        if len(first_line) < 80 and re.fullmatch(r"[A-Za-z0-9.\-+ ()]+", first_line) and " OR " in first_line:
            return from_expression(first_line)
        got = from_text(first_line)
        if got:
            return got
        if _COPYLEFT.search(first_line):
            return None
    return from_classifiers(classifiers)
