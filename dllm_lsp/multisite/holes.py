"""Find the placeholders ("holes") in a selection or in the scope around the cursor.

A hole is a node the user left to be written later:
- Python: a `pass` statement, a `...` statement, `raise NotImplementedError(...)`;
- Rust: `todo!()` and `unimplemented!()`;
- JavaScript/TypeScript: `throw new Error("not implemented")` (or naming the marker);
- Go: `panic("not implemented")` (or naming the marker);
- any language: a comment holding the marker (default `TODO`) that sits alone on its line,
  a block comment `/* TODO */` anywhere, and a leaf token spelled exactly like the marker.
Python's placeholders are no holes where they are meant: stub bodies (STUB_DECORATORS,
STUB_BASES, a `.pyi` file), an except clause that swallows (SWALLOW_CLAUSES), a finished class's
body (`class NotFound(Exception): pass`) and a method a subclass in the file overrides.
A hole alone on its line is filled with statements (a multi-line slot); one inside an
expression is filled with one line.
"""
from __future__ import annotations

import itertools
import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

import tree_sitter

from .sites import Site
from dllm_lsp.syntax.nodes import ancestors, field_name
from dllm_lsp.syntax.snapshot import Snapshot

from .node_types import CALL_TYPES, COMMENT_TYPES, FUNCTION_TYPES, is_word_char

DEFAULT_MARKER = "TODO"
MAX_HOLES = 16

SCOPE_TYPES = FUNCTION_TYPES | frozenset({
    "class_definition", "class_declaration", "class", "impl_item", "trait_item", "mod_item",
    "interface_declaration", "struct_item",
    # a Python function or class with its decorators: a cursor on `@cache` is in that function
    # (it was in none, and got every hole of the file)
    "decorated_definition",
})
BLOCK_TYPES = frozenset({
    "block", "statement_block", "module", "program", "source_file", "declaration_list",
    "class_body", "compound_statement", "translation_unit", "chunk",
})
PLACEHOLDER_MACROS = frozenset({"todo", "unimplemented"})
DOC_COMMENT_PREFIXES = ("///", "//!", "/**", "/*!")   # `/*!`: Rust's inner block doc, Doxygen/Qt
# Fields and node types that make a token spelled like the marker a name the code defines or
# refers to as a member (`State.TODO`, `TODO = 1`, `enum { TODO }`, `import TODO`), not a
# placeholder: a to-do app's `TODO` state was a hole where it was defined and where it was used.
NAMING_FIELDS = frozenset({"name", "left", "key", "field", "attribute", "property", "alias", "pattern",
                           "declarator", "label"})
NAMING_PARENTS = ("import", "enum")   # within two levels: `from s import TODO` holds it in a dotted_name
# Words every non-marker hole contains (whether they must stand as whole words), and how far
# above the word its hole node can be.
HOLE_WORDS = (("pass", True), ("...", False), ("NotImplementedError", True), ("todo", True),
              ("unimplemented", True), ("throw", True), ("panic", True))
HOLE_DEPTH = 3
# Python bodies where `...`, `pass` and `raise NotImplementedError` are what the code means, not
# a placeholder: an @overload variant (only its signature counts; PEP 484 writes `...`), an
# abstract method (the subclasses implement it) and a Protocol's members. They were holes: a
# cursor in an overload stub offered to fill it, and a fill wrote a body there. (A marker
# comment, `# TODO`, is still a hole there: the user wrote it.)
STUB_DECORATORS = frozenset({"overload", "abstractmethod", "abstractproperty", "abstractclassmethod",
                             "abstractstaticmethod"})
STUB_BASES = frozenset({"Protocol"})
# A stub file (`.pyi`, PEP 484) is all signatures: every placeholder in it is meant. Whether a
# document is one is known from its URI only, which the handlers pass on (`stub_file`).
STUB_FILE_SUFFIXES = (".pyi",)
# Clauses whose body of only `pass` or `...` swallows an exception on purpose
# (`except ImportError: pass`): a model's guess there (a `raise`, a log call) changes what the
# code does, and every cursor in a function with such a clause was offered a fill.
SWALLOW_CLAUSES = frozenset({"except_clause", "except_group_clause"})
# A Python class whose body is only placeholders (and a docstring) is finished when it subclasses
# something or is decorated: `class NotFound(Exception): pass`, `class Color(Enum): ...`, an empty
# `@dataclass`. Each was a hole, and a fill wrote a model's guess into the class. (`class Empty:
# pass`, neither, is still one; so is a marker comment in any of them.)
EMPTY_BODY_TYPES = frozenset({"pass_statement", "expression_statement", "comment"})
# Classes whose methods a subclass in the same file can override, and where a subclass names its
# bases: a base class's method left `raise NotImplementedError` (or `pass`, or a TypeScript
# `throw new Error("not implemented")`) that a subclass overrides is the base's abstract method or
# no-op hook, and was offered as a hole.
CLASS_TYPES = frozenset({"class_definition", "class_declaration", "class"})
BASES_TYPES = frozenset({"argument_list", "class_heritage", "extends_clause"})


@dataclass(frozen=True)
class HoleScope:
    start: int
    end: int
    holes: list[Site]


def is_stub_file(uri: str) -> bool:
    """Whether the document at `uri` is a Python stub file (`file:///p/m.pyi`; a percent-encoded
    path and an upper-case suffix count too)."""
    path = urllib.parse.unquote(urllib.parse.urlsplit(uri).path)
    return path.lower().endswith(STUB_FILE_SUFFIXES)


def find_holes(
    source: Snapshot,
    start: int,
    end: int,
    marker: str = DEFAULT_MARKER,
    span_tokens: int = 64,
    line_tokens: int = 32,
    stub_file: bool = False,
) -> HoleScope:
    """Holes inside [start, end) when it is a selection; for an empty range, the holes of the
    innermost enclosing function/class that has any. A cursor outside every function and class
    gets the whole file's holes; one inside them, where none has any, gets none (the file's
    holes, far from the cursor, were offered to a cursor in a finished function). `stub_file`:
    the document is a stub file (`is_stub_file`), where Python's placeholders are meant."""
    if not isinstance(marker, str) or not marker.strip():
        raise ValueError("the hole marker must be a non-empty string")
    if not 0 <= start <= end <= len(source.text):
        raise ValueError(f"range [{start}, {end}) is outside the document (length {len(source.text)})")
    if source.tree is None:
        return HoleScope(start, end, [])
    # Lines as LSP counts them (a lone CR ends one, as the planner reads them): a classic-Mac file
    # was one line to the finder, which then missed every `# TODO` alone on its line.
    finder = _Finder(source.line_view, marker.strip(), span_tokens, line_tokens, stub_file)
    if end > start:
        return HoleScope(start, end, finder.holes_in(start, end))
    node = source.smallest_node(start, start)
    searched = None
    for scope in [node, *ancestors(node)]:
        if scope.type in SCOPE_TYPES:
            searched = (source.start(scope), scope_end(source, scope))
            holes = finder.holes_in(*searched)
            if holes:
                return HoleScope(*searched, holes)
    if searched is not None:   # in a function or class, none of which has a hole
        return HoleScope(*searched, [])
    return HoleScope(0, len(source.text), finder.holes_in(0, len(source.text)))


def scope_end(source: Snapshot, scope: tree_sitter.Node) -> int:
    """Where `scope` ends, with the comments after it that are indented deeper than its first
    line: tree-sitter-python ends `def f(x):` whose body is only `# TODO` before the comment (an
    empty block, the comment its next sibling), and the cursor in `f` found no hole there."""
    end = source.end(scope)
    column = indent_column(source.text, source.start(scope))
    sibling = scope.next_named_sibling
    while sibling is not None and sibling.type in COMMENT_TYPES \
            and indent_column(source.text, source.start(sibling)) > column:
        end = source.end(sibling)
        sibling = sibling.next_named_sibling
    return end


def indent_column(text: str, offset: int) -> int:
    """The column of `offset` on its line (a lone CR ends a line too, as LSP counts them)."""
    return offset - max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) - 1


def names_something(node: tree_sitter.Node) -> bool:
    """Whether the leaf `node` is a name being defined, imported or used as a member."""
    if field_name(node) in NAMING_FIELDS or (node.parent is not None and "parameter" in node.parent.type):
        return True
    return any(word in a.type for a in itertools.islice(ancestors(node), 2) for word in NAMING_PARENTS)


class _Finder:
    def __init__(self, source: Snapshot, marker: str, span_tokens: int, line_tokens: int,
                 stub_file: bool = False) -> None:
        self.source = source
        self.stub_file = stub_file
        self.marker = marker
        self.marker_word = re.compile(rf"(?<!\w){re.escape(marker)}(?!\w)")
        self.placeholder_message = re.compile(rf"not (yet )?implemented|{re.escape(marker)}", re.IGNORECASE)
        # Each word is searched on its own, as a literal: `re` holds the GIL through one search,
        # and one alternation of all of them took 0.8 s over a 1.3 M-character file, during which
        # the event loop (and a fill run off it) stood still; a literal search takes 1 ms.
        self.words = [(re.compile(re.escape(word)), whole) for word, whole in (*HOLE_WORDS, (marker, True))]
        self.span_tokens = span_tokens
        self.line_tokens = line_tokens
        self._marker_is_a_name: bool | None = None
        self._overridden: dict[str, set[str]] = {}   # a class's name -> the methods its subclasses define

    def holes_in(self, start: int, end: int) -> list[Site]:
        """Holes inside [start, end). Every hole's text holds one of a few words, so the scope's
        text is searched for them (in C, by `re`) and only the nodes there are looked at: a
        code action on every cursor move must not walk a large file's whole tree."""
        found: dict[tuple[int, int], tree_sitter.Node] = {}
        for match in self.word_matches(start, end):
            node = self.source.smallest_node(match.start(), match.end())
            for candidate in [node, *itertools.islice(ancestors(node), HOLE_DEPTH)]:
                if self.is_hole(candidate):
                    span = (self.source.start(candidate), self.source.end(candidate))
                    if start <= span[0] and span[1] <= end:
                        found[span] = candidate
                    break
        spans = sorted(found, key=lambda s: (s[0], -s[1]))
        outermost, reach = [], -1
        for span in spans:   # a hole's insides are not holes of their own
            if span[0] >= reach:
                outermost.append(span)
                reach = span[1]
        return [self.site(found[span]) for span in outermost[:MAX_HOLES]]

    def word_matches(self, start: int, end: int) -> Iterator[re.Match]:
        """The occurrences of the hole words in [start, end), whole words where they must be."""
        text = self.source.text
        for pattern, whole in self.words:
            for match in pattern.finditer(text, start, end):
                if whole and (is_word_char(text[match.start() - 1:match.start()]) or
                              is_word_char(text[match.end():match.end() + 1])):
                    continue
                yield match

    def is_hole(self, node: tree_sitter.Node) -> bool:
        kind = node.type
        if kind == "pass_statement" or (
                kind == "expression_statement" and node.named_child_count == 1 and node.named_children[0].type == "ellipsis"):
            return not self.in_stub(node) and not self.swallows(node) and not self.finished_class(node) \
                and not self.overridden(node)
        if kind == "raise_statement":
            raised = node.named_children[0] if node.named_child_count else None
            return raised is not None and self.source.node_text(raised).startswith("NotImplementedError") \
                and not self.in_stub(node) and not self.overridden(node)
        if kind == "macro_invocation":
            name = node.child_by_field_name("macro")
            # `std::todo!()`, `core::unimplemented!()`: the path's last segment names the macro
            return name is not None and self.source.node_text(name).rsplit("::", 1)[-1] in PLACEHOLDER_MACROS
        if kind == "throw_statement" or (kind in CALL_TYPES and self.callee_text(node) == "panic"):
            return bool(self.placeholder_message.search(self.source.node_text(node))) \
                and not (kind == "throw_statement" and self.overridden(node))
        if kind in COMMENT_TYPES:
            return self.is_marker_comment(node)
        if node.child_count == 0 and node.is_named and "string" not in kind:
            return self.source.node_text(node) == self.marker and not names_something(node) \
                and not self.marker_is_a_name()
        return False

    def in_stub(self, node: tree_sitter.Node) -> bool:
        """Whether the Python placeholder `node` is the body of an @overload variant or an
        abstract method, or stands in a Protocol class (STUB_DECORATORS, STUB_BASES), or in a
        stub file."""
        if self.stub_file:
            return True
        function = next((a for a in ancestors(node) if a.type in ("function_definition", "class_definition")), None)
        if function is not None and function.type == "function_definition":
            wrapper = function.parent
            if wrapper is not None and wrapper.type == "decorated_definition" and any(
                    self.last_name(d.named_children[0]) in STUB_DECORATORS
                    for d in wrapper.named_children if d.type == "decorator" and d.named_child_count):
                return True
        for scope in ancestors(node):
            if scope.type == "class_definition":
                bases = scope.child_by_field_name("superclasses")
                return bases is not None and any(self.last_name(b) in STUB_BASES for b in bases.named_children)
        return False

    def finished_class(self, node: tree_sitter.Node) -> bool:
        """Whether the `pass` / `...` statement `node` stands in the body of a Python class that
        holds nothing else (a docstring, comments) and subclasses something or is decorated
        (EMPTY_BODY_TYPES)."""
        block = node.parent
        owner = block.parent if block is not None and block.type == "block" else None
        if owner is None or owner.type != "class_definition":
            return False
        for statement in block.named_children:
            if statement.type not in EMPTY_BODY_TYPES or (statement.type == "expression_statement" and not (
                    statement.named_child_count == 1 and statement.named_children[0].type in ("ellipsis", "string"))):
                return False
        bases = owner.child_by_field_name("superclasses")
        decorated = owner.parent is not None and owner.parent.type == "decorated_definition"
        return decorated or (bases is not None and bases.named_child_count > 0)

    def overridden(self, node: tree_sitter.Node) -> bool:
        """Whether the placeholder `node` stands in a method that a subclass in the same file
        overrides (CLASS_TYPES): the base's abstract method or hook, not a body to write."""
        method = next((a for a in ancestors(node) if a.type in FUNCTION_TYPES), None)
        # the class right around the method (a function nested in a method is no method)
        owner = next((a for a in ancestors(method) if a.type in FUNCTION_TYPES | CLASS_TYPES), None) \
            if method is not None else None
        if owner is None or owner.type not in CLASS_TYPES:
            return False
        method_name, class_name = method.child_by_field_name("name"), owner.child_by_field_name("name")
        if method_name is None or class_name is None:
            return False
        return self.source.node_text(method_name) in self.overridden_methods(class_name)

    def overridden_methods(self, class_name: tree_sitter.Node) -> set[str]:
        """The names of the methods that the classes naming `class_name` as a base define."""
        name = self.source.node_text(class_name)
        if name not in self._overridden:
            methods: set[str] = set()
            text = self.source.text
            for match in re.finditer(rf"(?<!\w){re.escape(name)}(?!\w)", text):
                use = self.source.smallest_node(match.start(), match.end())
                bases = next((a for a in itertools.islice(ancestors(use), 3) if a.type in BASES_TYPES), None)
                # python: class_definition > argument_list; ts: class_declaration > class_heritage > extends_clause
                subclass = next((a for a in itertools.islice(ancestors(bases), 2) if a.type in CLASS_TYPES), None) \
                    if bases is not None else None
                if subclass is None:
                    continue
                body = subclass.child_by_field_name("body")
                for member in body.named_children if body is not None else ():
                    if member.type == "decorated_definition":
                        member = member.child_by_field_name("definition") or member
                    member_name = member.child_by_field_name("name") if member.type in FUNCTION_TYPES else None
                    if member_name is not None:
                        methods.add(self.source.node_text(member_name))
            self._overridden[name] = methods
        return self._overridden[name]

    @staticmethod
    def swallows(node: tree_sitter.Node) -> bool:
        """Whether the `pass` / `...` statement `node` is the body of an except clause, or part of
        it (SWALLOW_CLAUSES)."""
        block = node.parent
        return block is not None and block.type == "block" and block.parent is not None \
            and block.parent.type in SWALLOW_CLAUSES

    def last_name(self, node: tree_sitter.Node) -> str:
        """`overload` for `overload`, `typing.overload`, `typing.Protocol[T]` (its subscripted
        value) and `overload(...)`: the name a decorator or a base class ends in."""
        while node.type in ("subscript", "call", "generic_type") and node.named_child_count:
            node = node.named_children[0]
        return self.source.node_text(node).rsplit(".", 1)[-1].strip()

    def marker_is_a_name(self) -> bool:
        """Whether the file defines or imports a name spelled like the marker somewhere (then its
        bare uses, `if s == TODO`, are that name too)."""
        if self._marker_is_a_name is None:
            self._marker_is_a_name = False
            text = self.source.text
            for match in re.finditer(re.escape(self.marker), text):
                if is_word_char(text[match.start() - 1:match.start()]) or is_word_char(text[match.end():match.end() + 1]):
                    continue
                node = self.source.smallest_node(match.start(), match.end())
                if node.child_count == 0 and node.is_named and names_something(node):
                    self._marker_is_a_name = True
                    break
        return self._marker_is_a_name

    def callee_text(self, call: tree_sitter.Node) -> str | None:
        callee = call.child_by_field_name("function")
        return self.source.node_text(callee) if callee is not None else None

    def is_marker_comment(self, node: tree_sitter.Node) -> bool:
        text = self.source.node_text(node)
        if text.startswith(DOC_COMMENT_PREFIXES) or not self.marker_word.search(text):
            return False
        if text.startswith("/*"):
            # `/* TODO */` anywhere; a block over several lines only when it is the note itself
            # (a license or documentation block that mentions a to-do somewhere is no hole)
            inner = text[2:-2] if text.endswith("*/") else text[2:]
            return "\n" not in inner.strip() or inner.lstrip(" \t\r\n*").startswith(self.marker)
        return self.alone_on_line(node)   # a trailing `x = 1  # TODO` annotates code; it is no hole

    def alone_on_line(self, node: tree_sitter.Node) -> bool:
        text = self.source.text
        start, end = self.source.start(node), self.source.end(node)
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        rest = text[end:line_end if line_end != -1 else len(text)].strip()
        return not text[line_start:start].strip() and (not rest or rest.startswith((";", "#", "//")))

    def site(self, node: tree_sitter.Node) -> Site:
        start, end = self.source.start(node), self.source.end(node)
        line_start = self.source.text.rfind("\n", 0, start) + 1
        indent = self.source.text[line_start:start]
        multi_line = self.alone_on_line(node)
        owner = node.parent
        if multi_line:
            owner = next((a for a in ancestors(node) if a.type in BLOCK_TYPES), node.parent)
        return Site(
            start=start,
            end=end,
            label=f"hole {self.source.node_text(node)[:40]!r}",
            single_line=not multi_line,
            max_tokens=self.span_tokens if multi_line else self.line_tokens,
            indent=indent if not indent.strip() else "",
            owner_type=owner.type if owner is not None else None,
            owner_start=self.source.start(owner) if owner is not None else None,
            outer_start=self.source.start(owner.parent) if owner is not None and owner.parent is not None else None,
        )
