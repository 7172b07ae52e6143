"""The context window around a span: the nearest prefix and suffix within a character budget
(a stand-in for the token budget: code runs about 3-4 characters per token), and snippets from
other open documents that share identifiers with the text near the cursor.
"""
from __future__ import annotations

import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
_QUERY_BEFORE, _QUERY_AFTER = 800, 200   # characters around the cursor that say what is relevant

# Words every file of a language has: they say nothing about relevance.
_COMMON_WORDS = frozenset("""
and as assert async await break case catch char class const continue def default del delete do
double elif else end enum except export extends false final finally float for from func function
global goto if impl import in int interface is lambda let local long loop match mod module mut new
nil none None not null or package pass private protected pub public raise return self Self short
static str string struct super switch then this throw true True False try type typedef typeof undefined
union unsigned use var void volatile while with yield println printf print len range std include
""".split())


def prefix_cut(text: str, end: int, budget: int, quantum: int) -> int:
    """Where the prefix begins: the first line start inside the budget before `end`.

    The lower bound is rounded up to a multiple of `quantum`, so as the user types the prefix
    start stays put for a while and a model's cached prefix stays valid."""
    low = end - budget
    if low <= 0:
        return 0
    quantum = max(1, min(quantum, budget // 4))   # rounding may cost at most a quarter of the budget
    low = -(-low // quantum) * quantum
    if text[low - 1] == "\n":
        return low
    newline = text.find("\n", low, end)
    return low if newline < 0 else newline + 1


def suffix_cut(text: str, start: int, budget: int) -> int:
    """Where the suffix ends: after the last whole line inside the budget after `start`."""
    high = start + budget
    if high >= len(text):
        return len(text)
    newline = text.rfind("\n", start, high)
    return high if newline < 0 else newline + 1


# chunks, identifier -> chunk numbers, and each chunk's (lines with text, blank lines, characters
# of its lines with trailing blanks dropped): what a chunk's commented block will measure
Index = tuple[list[str], dict[str, list[int]], list[tuple[int, int, int]]]


class IndexCache:
    """The other documents' indexes, the most recently used kept up to `max_chars` characters of
    text in all (an index holds about three times its text). Bounded by characters, not by count:
    a cache of 64 entries re-indexed every other document on every keystroke once 65 were open
    (170 ms a plan for 65 of the standard library's largest modules on a 2-core CPU, against 0.3 ms
    with their indexes kept)."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._entries: OrderedDict[tuple[str, int], Index] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()     # plans run on several worker threads
        self.builds = 0

    def get(self, text: str, lines_per_chunk: int) -> Index:
        key = (text, lines_per_chunk)
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found
        built = _index(text, lines_per_chunk)
        with self._lock:
            if key not in self._entries:
                self.builds += 1
                self._entries[key] = built
                self._chars += len(text)
                while self._chars > self.max_chars and len(self._entries) > 1:
                    (old, _), _ = self._entries.popitem(last=False)
                    self._chars -= len(old)
        return built


# Snippets come from the first this many other documents (the server lists the most recently
# opened or changed first): with 100 similar modules open, scoring every chunk of every one took
# 8 ms a plan; editors keep far more files open than the few a user is working across.
SNIPPET_DOCUMENTS = 20

# 16 Mi characters: some 500 open files of 32 KB each, ~90 MB of indexes at most (measured on
# real code: the inverted index outweighs the text several times).
INDEXES = IndexCache(max_chars=16 * 1024 * 1024)
# Other documents larger than this are no source of snippets (a log, a generated or minified
# file: poor context, and indexing one costs ~0.26 s a million characters), and one plan looks at
# no more characters than half the cache holds. Five open files of 3.6 M characters had emptied
# the cache at every plan: each completion re-indexed them all, 2 s on the event loop.
SNIPPET_MAX_DOCUMENT_CHARS = 512 * 1024
SNIPPET_MAX_CHARS = INDEXES.max_chars // 2


def _index(text: str, lines_per_chunk: int) -> Index:
    """Chunks of a document, an inverted index identifier -> chunk numbers, and each chunk's sizes."""
    lines = text.split("\n")
    chunks: list[str] = []
    index: dict[str, list[int]] = {}
    sizes: list[tuple[int, int, int]] = []
    for first in range(0, len(lines), lines_per_chunk):
        chunk = "\n".join(lines[first: first + lines_per_chunk]).strip("\n")
        if not chunk.strip():
            continue
        number = len(chunks)
        chunks.append(chunk)
        for word in set(_IDENTIFIER.findall(chunk)) - _COMMON_WORDS:
            index.setdefault(word, []).append(number)
        kept = [line.rstrip() for line in chunk.split("\n")]
        sizes.append((sum(1 for line in kept if line), sum(1 for line in kept if not line), sum(map(len, kept))))
    return chunks, index, sizes


def query_words(text: str, start: int, end: int) -> set[str]:
    near = text[max(0, start - _QUERY_BEFORE): start] + "\n" + text[end: end + _QUERY_AFTER]
    return set(_IDENTIFIER.findall(near)) - _COMMON_WORDS


def document_name(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[-1] or uri


def relevant_snippets(
    words: set[str],
    others: Sequence[tuple[str, str]],
    budget: int,
    comment: str,
    lines_per_chunk: int,
    min_overlap: int,
) -> tuple[str, tuple[str, ...]]:
    """Commented snippets (most shared identifiers first) fitting in `budget` characters, and the
    names of the documents they came from. `others` in order of relevance: the first
    SNIPPET_DOCUMENTS are looked at (those up to SNIPPET_MAX_DOCUMENT_CHARS, SNIPPET_MAX_CHARS in
    all), and between equal scores the earlier document wins."""
    if budget <= 0 or not words or not others:
        return "", ()
    scored: list[tuple[int, int, int, str, str, tuple[int, int, int]]] = []
    looked_at = 0
    for doc_number, (uri, text) in enumerate(others[:SNIPPET_DOCUMENTS]):
        if len(text) > SNIPPET_MAX_DOCUMENT_CHARS:
            continue
        looked_at += len(text)
        if looked_at > SNIPPET_MAX_CHARS:
            break
        chunks, index, sizes = INDEXES.get(text, lines_per_chunk)
        hits: Counter[int] = Counter()
        for word in words:
            for number in index.get(word, ()):
                hits[number] += 1
        name = document_name(uri)
        for number, score in hits.items():
            if score >= min_overlap:
                scored.append((-score, doc_number, number, name, chunks[number], sizes[number]))
    scored.sort()
    pieces: list[str] = []
    sources: list[str] = []
    used = 0
    bare = comment.rstrip()     # what a blank line becomes
    # Similar files can score thousands of chunks; only those that fit are formatted (formatting
    # each took 15 ms a plan with 100 generated modules open).
    for _, _, _, name, chunk, (lines_with_text, blank_lines, chars) in scored:
        header = f"{comment} From {name}:\n"
        size = (len(header) + lines_with_text * (len(comment) + 2) + chars + blank_lines * (len(bare) + 1))
        if used + size > budget:
            continue
        block = header + "".join(f"{comment} {line}".rstrip() + "\n" for line in chunk.split("\n"))
        pieces.append(block)
        used += len(block)
        if name not in sources:
            sources.append(name)
    return "".join(pieces), tuple(sources)
