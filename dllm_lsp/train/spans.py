"""Where the holes go in a training file: syntax-aware spans (tree-sitter) plus random ones.

The kinds mirror what the span planner asks the model to fill in an editor: the tail of a
line, whole lines, a block body, an expression, an argument list; uniformly random byte
ranges are mixed in so that the model does not rely on holes always being well-formed.
All offsets are byte offsets into the UTF-8 encoded file.
"""
from __future__ import annotations

import bisect
import random
import re
from dataclasses import dataclass
from functools import cache

import tree_sitter

KINDS = ("lines", "line_tail", "block", "expression", "arguments", "random")
DEFAULT_WEIGHTS = {"lines": 0.34, "line_tail": 0.2, "block": 0.1, "expression": 0.14, "arguments": 0.08,
                   "random": 0.14}

BLOCK_TYPES = {"block", "statement_block", "class_body"}
ARGUMENT_TYPES = {"argument_list", "parameters", "arguments", "formal_parameters"}
EXPRESSION_TYPES = {
    # python
    "call", "attribute", "binary_operator", "comparison_operator", "boolean_operator", "string",
    "list", "dictionary", "tuple", "subscript", "keyword_argument", "lambda", "conditional_expression",
    "list_comprehension", "dictionary_comprehension", "generator_expression", "parenthesized_expression",
    "not_operator", "unary_operator", "assignment", "augmented_assignment", "return_statement",
    # javascript
    "call_expression", "member_expression", "binary_expression", "arrow_function", "object", "array",
    "template_string", "subscript_expression", "ternary_expression", "assignment_expression",
    "new_expression", "unary_expression",
}
WORD_START = re.compile(rb"\w+|[^\w\s]+")


@cache
def parser_for(language: str) -> tree_sitter.Parser:
    if language == "python":
        import tree_sitter_python as grammar
    elif language == "javascript":
        import tree_sitter_javascript as grammar
    else:
        raise ValueError(f"no tree-sitter grammar wired up for {language!r}")
    return tree_sitter.Parser(tree_sitter.Language(grammar.language()))


@dataclass
class FileSpans:
    """A file's bytes, line starts and syntax nodes by kind, ready for sampling spans."""

    data: bytes
    line_starts: list[int]        # byte offset of every line start, plus len(data)
    nodes: dict[str, list[tuple[int, int]]]
    bytes_per_token: float | None = None   # measured by the first context tokenized from it

    @classmethod
    def analyse(cls, text: str, language: str) -> FileSpans:
        data = text.encode("utf-8")
        starts = [0] + [m.end() for m in re.finditer(rb"\n", data)]
        if starts[-1] != len(data):
            starts.append(len(data))
        nodes: dict[str, list[tuple[int, int]]] = {"block": [], "expression": [], "arguments": []}
        tree = parser_for(language).parse(data)
        stack = [tree.root_node]
        while stack:
            node = stack.pop()
            kind = node.type
            if kind in BLOCK_TYPES:
                nodes["block"].append((node.start_byte, node.end_byte))
            elif kind in ARGUMENT_TYPES and node.end_byte - node.start_byte > 2:
                nodes["arguments"].append((node.start_byte + 1, node.end_byte - 1))   # inside the parens
            elif kind in EXPRESSION_TYPES:
                nodes["expression"].append((node.start_byte, node.end_byte))
            stack.extend(node.named_children)
        return cls(data, starts, nodes)

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset) - 1

    def full_lines(self, start: int, end: int) -> tuple[int, int]:
        """Widen [start, end) to whole lines, trailing newline included (HumanEval's line spans)."""
        first = self.line_starts[self.line_of(start)]
        last_line = self.line_of(max(end - 1, start))
        stop = self.line_starts[last_line + 1] if last_line + 1 < len(self.line_starts) else len(self.data)
        return first, stop


def char_boundary(data: bytes, i: int) -> int:
    """Move forward to the start of a UTF-8 character."""
    while 0 < i < len(data) and (data[i] & 0xC0) == 0x80:
        i += 1
    return i


def sample_span(fs: FileSpans, kind: str, rng: random.Random, near: int | None = None,
                radius: int = 800) -> tuple[int, int] | None:
    """One span of `kind` (optionally near byte `near`), or None when the file has none."""
    data, starts = fs.data, fs.line_starts
    n_lines = len(starts) - 1
    if n_lines < 1:
        return None

    def pick_line() -> int:
        if near is None:
            return rng.randrange(n_lines)
        lo, hi = fs.line_of(max(near - radius, 0)), fs.line_of(min(near + radius, len(data) - 1))
        return rng.randint(lo, max(lo, min(hi, n_lines - 1)))

    if kind in ("lines", "line_tail"):
        for _ in range(8):
            i = pick_line()
            a, b = starts[i], starts[i + 1]
            if not data[a:b].strip():
                continue
            if kind == "lines":
                count = rng.choice((1, 1, 1, 1, 2, 2, 3, 4, 6))
                return a, starts[min(i + count, n_lines)]
            line = data[a:b].rstrip(b"\n")
            cuts = [m.start() for m in WORD_START.finditer(line)]
            if not cuts:
                continue
            return a + rng.choice(cuts), a + len(line)
        return None
    if kind == "random":
        start = rng.randrange(len(data)) if near is None else \
            rng.randint(max(near - radius, 0), min(near + radius, len(data) - 1))
        length = int(rng.expovariate(1 / 60)) + 1
        a = char_boundary(data, start)
        return a, char_boundary(data, min(a + length, len(data)))
    nodes = fs.nodes.get(kind, [])
    if near is not None:
        nodes = [n for n in nodes if abs(n[0] - near) < radius]
    if not nodes:
        return None
    a, b = rng.choice(nodes)
    if kind == "block":
        a, b = fs.full_lines(a, b)
    return (a, b) if b > a else None


def sample_spans(fs: FileSpans, rng: random.Random, max_spans: int = 3,
                 weights: dict[str, float] = DEFAULT_WEIGHTS) -> list[tuple[int, int]]:
    """One to `max_spans` non-overlapping spans, sorted, with context between them."""
    kinds, w = zip(*weights.items())
    count = rng.choices((1, 2, 3), (0.6, 0.25, 0.15))[0]
    count = min(count, max_spans)
    spans: list[tuple[int, int]] = []
    for attempt in range(count * 4):
        if len(spans) == count:
            break
        near = spans[0][0] if spans else None
        span = sample_span(fs, rng.choices(kinds, w)[0], rng, near)
        if span is None:
            continue
        a, b = span
        # Holes need context between them (a slot touching a slot is one bigger slot).
        if all(b < s or a > e for s, e in spans):
            spans.append(span)
    return sorted(spans)
