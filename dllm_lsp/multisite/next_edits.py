"""Next edits: after the user changed one site, the related sites that should change with it.

The change is found by comparing the document with its earlier versions (newest first, so a
rename typed one keystroke at a time is found once the new name is complete):
- **rename** of an identifier (a parameter, a local, a function name): the other references
  of the old name's binding by scope rules (`Bindings`: the enclosing function, or the block of a
  JS `let`, a Rust `let`, a Go `:=`; for a function's own name the scope that holds it, where it is
  used as a value too; for a method its receivers in its class, impls or Go type) and whole-word mentions
  in the function's docstring or doc comment get the new name. This part is deterministic: no model involved.
- **signature** change (a parameter added or removed): every call site of the function in the
  file has its argument list masked; the model fills them jointly, conditioned on the new
  signature, and `sites.settle` keeps an argument list unchanged when its fill does not parse.
- **call** change (an argument added or removed at one call): the other calls' argument lists
  and, when its parameter count no longer fits, the definition's parameter list are masked
  and filled jointly, conditioned on the changed call.
"""
from __future__ import annotations

import itertools
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Literal
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

import tree_sitter

from dllm_lsp.syntax.nodes import ancestors, enclosing, field_name, walk
from dllm_lsp.syntax.snapshot import Snapshot
from dllm_lsp.text_compare import common_prefix_length, common_suffix_length

from .sites import Outcome, Site
from .node_types import (
    ARGUMENT_LIST_TYPES,
    CALL_TYPES,
    COMMENT_TYPES,
    FUNCTION_TYPES,
    IDENTIFIER_TYPES,
    PARAMETER_LIST_TYPES,
    is_word_char,
    word_nodes,
)

MAX_VERSIONS = 64
MAX_HISTORY_CHARS = 4_000_000
# All documents' histories together: 20 open files of 117 K characters typed in held 159 MB with
# only the per-document bounds. Beyond it, the least recently changed documents lose their oldest
# versions first (each keeps its current text).
MAX_TOTAL_HISTORY_CHARS = 32 * 1024 * 1024
# Identifier positions that name something else than the variable in scope: a member, key or
# keyword spelled `identifier` by its grammar. (Only Python's were listed: a Java, Lua or Go
# parameter rename renamed `this.width`, `t.width`, `{width = ...}` and `Rect{width: ...}` too.)
FOREIGN_NAME_FIELDS = {
    ("attribute", "attribute"), ("keyword_argument", "name"),                 # python obj.attr, f(kw=...)
    ("field_access", "field"), ("method_invocation", "name"),                 # java this.f, obj.m(), m()
    ("dot_index_expression", "field"), ("method_index_expression", "method"),  # lua t.f, t:m()
    ("field", "name"),                                                        # lua {f = ...} ({[k] = ...} is a reference)
}
# A name that is both a field's and a variable's (Rust `Rect { width }`, JS `{ width }`): a
# rename writes `width: size` there, so the field keeps its name.
SHORTHAND_TYPES = frozenset({"shorthand_field_initializer", "shorthand_property_identifier",
                             "shorthand_property_identifier_pattern"})
# Bodies that make a function a method: its bare name does not call it (`area()` in a method of
# a class is the module's function), only `self.area()`, `this.area()` or `Self::area()` do.
CLASS_BODY_TYPES = frozenset({"class_definition", "class_body", "class_declaration", "class", "impl_item",
                              "trait_item", "declaration_list", "interface_body"})
RECEIVERS = frozenset({"self", "cls", "this", "Self"})
# A method's name that its grammar spells as a member's, not as an `identifier`: Go's
# `func (s S) Area()` (field_identifier) and a JS/TS class method (property_identifier). Renamed
# through the receiver only, as a Python or Rust method is: a bare `Area()` is another function.
METHOD_NAME_TYPES = frozenset({"field_identifier", "property_identifier"})
# JS/TS functions that give `this` (and `super`) a value of their own: in them `this.area` is not
# the class's (an arrow function keeps the method's `this`).
OWN_THIS_TYPES = frozenset({"function_expression", "function_declaration", "generator_function",
                            "generator_function_declaration", "function"})
# The members of a JS/TS class body, whose `static` decides what `this` is in them: the class
# itself in a static one, an instance otherwise (a class may have both a static and an instance
# `area`). The members that a method's rename renames with it: the accessor pair's other half and
# TypeScript's overload signatures.
CLASS_MEMBER_TYPES = frozenset({"method_definition", "field_definition", "public_field_definition",
                                "class_static_block"})
METHOD_MEMBER_TYPES = frozenset({"method_definition", "method_signature", "abstract_method_signature"})
# A method named through its receiver without a call (`key=self.area`, `[1].map(this.area)`,
# `.map(Self::area)`, Java's `this::area`) is the method too; Rust's `self.area`, Go's `s.Area` and
# Java's `this.area` read a field.
RECEIVER_VALUE_TYPES = frozenset({"attribute", "member_expression", "scoped_identifier", "method_reference"})
# Where a class names the class it extends: JS `class_heritage` (TypeScript's holds an
# `extends_clause`), Java `superclass`.
HERITAGE_TYPES = frozenset({"class_heritage", "superclass"})
# Scopes a name can be bound in besides functions: a comprehension's `for` targets, and a Python
# class body's names (seen from that body only: its methods do not see them).
COMPREHENSION_TYPES = frozenset({"list_comprehension", "set_comprehension", "dictionary_comprehension",
                                 "generator_expression"})
# Children of a function (a class) that are its own scope: its body and its parameters' names. Its
# name, decorators, return type, superclasses and parameter defaults are seen from outside.
OWN_SCOPE_FIELDS = frozenset({"body", "parameters", "parameter", "receiver"})
# Where an identifier is a name being bound (declared, or in Python assigned) in its scope, and
# the patterns it can stand in there (`a, b = ...`, `let (a, b) = ...`, `const [a] = ...`). An
# assignment in JS, Rust or Go assigns the outer name, so only Python's count.
BINDING_FIELDS = frozenset({
    ("assignment", "left"), ("augmented_assignment", "left"), ("for_statement", "left"),       # python
    ("for_in_clause", "left"), ("named_expression", "name"), ("as_pattern", "alias"),
    ("function_definition", "name"), ("class_definition", "name"), ("aliased_import", "alias"),
    ("variable_declarator", "name"), ("for_in_statement", "left"), ("catch_clause", "parameter"),  # js / ts
    ("function_declaration", "name"), ("generator_function_declaration", "name"), ("class_declaration", "name"),
    ("let_declaration", "pattern"), ("let_condition", "pattern"), ("function_item", "name"),      # rust
    ("short_var_declaration", "left"), ("var_spec", "name"), ("const_spec", "name"),               # go
    ("range_clause", "left"), ("for_expression", "pattern"),                                          # go, rust
})
PATTERN_TYPES = frozenset({
    "pattern_list", "tuple_pattern", "list_pattern", "tuple", "list", "parenthesized_expression",
    "list_splat_pattern", "as_pattern_target", "expression_list", "array_pattern", "rest_pattern",
    "assignment_pattern", "object_pattern", "pair_pattern", "tuple_struct_pattern", "ref_pattern", "mut_pattern",
})
# Python's declarations that a function's name is its enclosing scope's (`global x`, `nonlocal x`).
NOT_LOCAL_TYPES = frozenset({"global_statement", "nonlocal_statement"})
IMPORT_TYPES = frozenset({"import_statement", "import_from_statement", "future_import_statement", "use_declaration"})
# Names this short are matched in a function's documentation only where the text marks them
# as a name (`a`, :param a:, @param a): as plain words they are the English article and the like.
SHORT_NAME_CHARS = 2
WRAPPER_TYPES = frozenset({"export_statement", "decorated_definition"})
# Fields of a parameter that hold another name than the parameter's own: a default value
# (`def g(x=width)`: the outer `width`) or a type.
NOT_PARAMETER_FIELDS = frozenset({"value", "right", "type", "default_value"})


class EditHistory:
    """Recent texts of each open document (the current one included), oldest first, bounded.
    Keyed as the server keys its documents, by the percent-decoded URI: a document opened as
    `c%3A/x.py` and closed as `c:/x.py` had kept its history for good."""

    def __init__(self, max_versions: int = MAX_VERSIONS, max_chars: int = MAX_HISTORY_CHARS,
                 max_total_chars: int = MAX_TOTAL_HISTORY_CHARS) -> None:
        self.max_versions = max_versions
        self.max_chars = max_chars
        self.max_total_chars = max_total_chars
        self._versions: dict[str, deque[str]] = {}   # the most recently changed document last

    def record(self, uri: str, text: str) -> None:
        uri = unquote(uri)
        versions = self._versions.pop(uri, None) or deque()
        self._versions[uri] = versions
        if versions and versions[-1] == text:
            return
        versions.append(text)
        while len(versions) > self.max_versions or (len(versions) > 1 and sum(map(len, versions)) > self.max_chars):
            versions.popleft()
        total = sum(len(t) for kept in self._versions.values() for t in kept)
        for kept in self._versions.values():
            while total > self.max_total_chars and len(kept) > 1:
                total -= len(kept.popleft())
            if total <= self.max_total_chars:
                break

    def forget(self, uri: str) -> None:
        self._versions.pop(unquote(uri), None)

    def earlier(self, uri: str, current: str) -> list[str]:
        """Earlier texts, newest first, without the current text."""
        return [t for t in reversed(self._versions.get(unquote(uri), ())) if t != current]


def module_name(uri: str) -> str | None:
    """The Python module name of the document at `uri` (`shapes` for file:///p/shapes.py, the
    package's for its `__init__.py`), which an import of the file from itself names; None when
    the URI names no .py file."""
    path = PurePosixPath(unquote(urlsplit(uri).path))
    if path.suffix.lower() not in (".py", ".pyi"):
        return None
    return path.parent.name if path.stem == "__init__" else path.stem


@dataclass
class Change:
    kind: Literal["rename", "signature", "call"]
    start: int                 # the changed site in the new text
    end: int
    old_name: str = ""         # rename: the name before
    new_name: str = ""         # rename: the name after; signature, call: the function's name
    old_count: int = 0         # signature: parameters before and after; call: arguments
    new_count: int = 0


@dataclass
class NextEditsPlan:
    change: Change
    renames: list[Outcome] = field(default_factory=list)   # deterministic edits
    sites: list[Site] = field(default_factory=list)        # argument lists for the model


def changed_words(old: str, new: str) -> tuple[int, int, int] | None:
    """(start, end in old, end in new) of the differing region grown to whole words."""
    if old == new:
        return None
    start = common_prefix_length(old, new)
    tail = common_suffix_length(old, new, min(len(old), len(new)) - start)
    old_end, new_end = len(old) - tail, len(new) - tail
    while start > 0 and is_word_char(new[start - 1]):
        start -= 1
    while new_end < len(new) and is_word_char(new[new_end]):
        new_end += 1
        old_end += 1
    return start, old_end, new_end


def identifier_at(source: Snapshot, start: int, end: int, name: str) -> tree_sitter.Node | None:
    """The identifier spelled `name` at [start, end), or the member-spelled name of a Go or JS/TS
    method defined there."""
    node = source.smallest_node(start, end)
    if (node.type in IDENTIFIER_TYPES or member_method(node) is not None) and source.start(node) == start \
            and source.end(node) == end and source.node_text(node) == name:
        return node
    return None


def member_method(node: tree_sitter.Node) -> tree_sitter.Node | None:
    """The method whose member-spelled name `node` is (METHOD_NAME_TYPES): a Go method (it has a
    receiver) or a method of a JS/TS class body (not an object literal's); None otherwise."""
    method = node.parent
    if node.type not in METHOD_NAME_TYPES or method is None or field_name(node) != "name":
        return None
    if method.type == "method_declaration" and method.child_by_field_name("receiver") is not None:
        return method
    if method.type == "method_definition" and method.parent is not None and method.parent.type == "class_body":
        return method
    return None


def function_name(source: Snapshot, function: tree_sitter.Node) -> str | None:
    name = function.child_by_field_name("name")
    if name is None and function.parent is not None and function.parent.type == "variable_declarator":
        name = function.parent.child_by_field_name("name")   # const f = (x) => ...
    return source.node_text(name) if name is not None else None


def parameter_count(parameters: tree_sitter.Node) -> int:
    return sum(1 for c in parameters.named_children if c.type not in COMMENT_TYPES)


def detect_change(old_text: str, new: Snapshot) -> Change | None:
    """The rename or signature change that turns `old_text` into the text of `new`, if it is one."""
    region = changed_words(old_text, new.text)
    if region is None or new.tree is None:
        return None
    start, old_end, new_end = region
    old_name, new_name = old_text[start:old_end], new.text[start:new_end]
    old = new.reparsed(old_text, start, new_end, old_end)
    if old_name.isidentifier() and new_name.isidentifier():
        if old.error_count() > new.error_count():
            return None   # a half-typed version: compare with an older, complete one
        new_node = identifier_at(new, start, new_end, new_name)
        old_node = identifier_at(old, start, old_end, old_name)
        # A rename turns a variable's name into a fresh one. A member or keyword that now names
        # another one (`shape.size`, `Rect(size=...)`), or a reference that now uses a name the
        # scope already has (`a + b` -> `a + c`, `area(1)` -> `surface(1)`), changed what the
        # code refers to: renaming the declaration after it broke the file.
        # A method is renamed from its definition only (`this.area()` -> `this.size()` calls another
        # one), and not onto a name its class already has (Go's methods and fields of the type).
        if new_node is not None and old_node is not None and renamable(new, new_node, new_name) \
                and renamable(old, old_node, old_name) and not has_name(old, rename_scope(old, old_node), new_name) \
                and new_name not in member_names(old, old_node):
            return Change("rename", start, new_end, old_name, new_name)
    return detect_signature_change(old, new, start, new_end) or detect_call_change(old, new, start, new_end)


def detect_signature_change(old: Snapshot, new: Snapshot, start: int, end: int):
    node = new.smallest_node(start, end)
    parameters = node if node.type in PARAMETER_LIST_TYPES else enclosing(node, PARAMETER_LIST_TYPES)
    if parameters is None or parameters.parent is None or parameters.parent.type not in FUNCTION_TYPES:
        return None
    name = function_name(new, parameters.parent)
    if name is None:
        return None
    if old.error_count() > new.error_count():
        return None
    before = [n.parent for n in word_nodes(old, name)
              if n.parent is not None and n.parent.type in FUNCTION_TYPES and function_name(old, n.parent) == name]
    if not before:
        return None
    # the same function before the change: the one whose start is nearest
    closest = min(before, key=lambda f: abs(old.start(f) - new.start(parameters.parent)))
    old_parameters = closest.child_by_field_name("parameters")
    if old_parameters is None:
        return None
    old_count, new_count = parameter_count(old_parameters), parameter_count(parameters)
    if old_count == new_count:
        return None
    return Change("signature", new.start(parameters), new.end(parameters), new_name=name,
                  old_count=old_count, new_count=new_count)


def detect_call_change(old: Snapshot, new: Snapshot, start: int, end: int) -> Change | None:
    """An argument added to or removed from one call: the same call in the earlier version
    (it starts at the same offset, before the change) had another number of arguments."""
    node = new.smallest_node(start, end)
    arguments = node if node.type in ARGUMENT_LIST_TYPES else enclosing(node, ARGUMENT_LIST_TYPES)
    call = arguments.parent if arguments is not None else None
    if call is None or call.type not in CALL_TYPES or call.child_by_field_name("arguments") is None:
        return None
    name = callee_name(new, call)
    if name is None or old.error_count() > new.error_count():
        return None
    call_start = new.start(call)
    at = old.smallest_node(call_start, call_start)
    before = next((n for n in [at, *ancestors(at)] if n.type == call.type and old.start(n) == call_start), None)
    old_arguments = before.child_by_field_name("arguments") if before is not None else None
    if old_arguments is None or callee_name(old, before) != name:
        return None
    old_count, new_count = parameter_count(old_arguments), parameter_count(arguments)
    if old_count == new_count:
        return None
    return Change("call", new.start(arguments), new.end(arguments), new_name=name,
                  old_count=old_count, new_count=new_count)


def is_reference(source: Snapshot, node: tree_sitter.Node, name: str) -> bool:
    if node.type not in IDENTIFIER_TYPES or source.node_text(node) != name:
        return False
    parent = node.parent
    if parent is None:
        return True
    if parent.type == "field" and parent.child_count and parent.children[0].type == "[":
        return True                                        # lua {[k] = v}: the key is an expression
    if parent.type == "literal_element" and field_name(parent) == "key" and not map_literal(parent):
        return False                                       # go Rect{width: ...}: a field name
    return (parent.type, field_name(node)) not in FOREIGN_NAME_FIELDS


def map_literal(key: tree_sitter.Node) -> bool:
    """Whether the key of a Go keyed_element is a map's (an expression) rather than a field name."""
    literal = next((a for a in ancestors(key) if a.type == "composite_literal"), None)
    kind = literal.child_by_field_name("type") if literal is not None else None
    return kind is not None and kind.type == "map_type"


def renamable(source: Snapshot, node: tree_sitter.Node, name: str) -> bool:
    """A variable, or the definition of a Go or JS/TS method (a member name, METHOD_NAME_TYPES)."""
    return is_variable(source, node, name) or member_method(node) is not None


def is_variable(source: Snapshot, node: tree_sitter.Node, name: str) -> bool:
    """A reference that names only a variable (a shorthand field names a field too)."""
    return is_reference(source, node, name) and (node.parent is None or node.parent.type not in SHORTHAND_TYPES)


def rename_scope(source: Snapshot, node: tree_sitter.Node) -> tree_sitter.Node:
    """Where a rename of the identifier `node` reaches: a function's name, the scope that holds
    the function (the class for a method); any other name, its enclosing function (or the file)."""
    function = declared_function(node)
    if function is not None:
        return method_class(function) or enclosing(function, FUNCTION_TYPES) or source.root
    return enclosing(node, FUNCTION_TYPES) or source.root


def has_name(source: Snapshot, scope: tree_sitter.Node, name: str) -> bool:
    """Whether some variable of `scope` is already called `name`."""
    return any(is_reference(source, node, name) or (node.parent is not None and node.parent.type in SHORTHAND_TYPES)
               for node in word_nodes(source, name, source.start(scope), source.end(scope)))


def declared_function(node: tree_sitter.Node) -> tree_sitter.Node | None:
    """The function whose name `node` is, if it is one."""
    parent = node.parent
    return parent if parent is not None and parent.type in FUNCTION_TYPES and field_name(node) == "name" else None


def method_class(function: tree_sitter.Node) -> tree_sitter.Node | None:
    """The class (impl, trait) `function` is a method of, None for a function of a module or
    of another function."""
    for parent in ancestors(function):
        if parent.type in FUNCTION_TYPES:
            return None
        if parent.type in CLASS_BODY_TYPES:
            return parent
    return None


def documentation_nodes(source: Snapshot, function: tree_sitter.Node) -> list[tree_sitter.Node]:
    """The function's docstring (Python) and the comments right above it (JSDoc, ///)."""
    docs = []
    body = function.child_by_field_name("body")
    if body is not None and body.named_child_count:
        first = body.named_children[0]
        if first.type == "expression_statement" and first.named_child_count == 1 and \
                first.named_children[0].type == "string":
            docs.append(first.named_children[0])
    outer = function.parent if function.parent is not None and function.parent.type in WRAPPER_TYPES else function
    # the comments alone on their lines right above it: a trailing comment of the statement before
    # (`LIMIT = 10  # the width limit`) or one a blank line away documents something else
    below = source.start(outer)
    sibling = outer.prev_named_sibling
    while sibling is not None and sibling.type in COMMENT_TYPES and comment_right_above(source, sibling, below):
        docs.append(sibling)
        below = source.start(sibling)
        sibling = sibling.prev_named_sibling
    return docs


def comment_right_above(source: Snapshot, comment: tree_sitter.Node, below: int) -> bool:
    """Whether `comment` is alone on its line(s) and ends on the line just above offset `below`."""
    text = source.line_view.text
    start, end = source.start(comment), source.end(comment)
    line_start = text.rfind("\n", 0, start) + 1
    gap = text[end:below]
    breaks = gap.count("\n") + (1 if text[start:end].endswith("\n") else 0)   # Rust's line comments own their break
    return not text[line_start:start].strip() and not gap.strip() and breaks == 1


def rename_edits(new: Snapshot, change: Change, module_name: str | None = None) -> list[Outcome]:
    """The deterministic edits that follow a rename. `module_name`: the file's module name (its
    stem), so that `from <it> import old` names the renamed function itself."""
    site = identifier_at(new, change.start, change.end, change.new_name)
    if site is None:
        return []
    old_name, new_name = change.old_name, change.new_name
    names = Bindings(new, old_name, module_name)
    function = declared_function(site)
    if function is not None:
        return function_renames(new, names, function, new_name)
    scope = enclosing(site, FUNCTION_TYPES) or new.root
    edits = names.references(scope, new_name, names.own_block_binding(site, scope))
    if enclosing(site, PARAMETER_LIST_TYPES) is not None and scope is not new.root:
        word = documentation_word(old_name)
        for doc in documentation_nodes(new, scope):
            base = new.start(doc)
            for match in word.finditer(new.node_text(doc)):
                edits.append(Outcome(base + match.start(), base + match.end(), new_name,
                                     f"documentation of {old_name}", "rename"))
        edits += keyword_arguments(new, function_name(new, scope), old_name, new_name)
    return without_overlaps(edits)


@dataclass(frozen=True)
class BlockBinding:
    """A declaration whose name is seen in a block, not in its whole function: a JS/TS `let`,
    `const`, `for (const x of ...)`, `catch (e)`; a Rust `let`, `if let`, `for x in`; a Go `:=`,
    `var`, `const` in a function, `for x := range`."""
    name: tree_sitter.Node   # the declared identifier
    block: tree_sitter.Node  # the block (statement) that holds the declaration and where it is seen
    start: int               # the part of it that sees the name: the whole block in JS (its
    end: int                 # temporal dead zone is the same binding), after the declaration in Rust and Go


def block_binding(source: Snapshot, node: tree_sitter.Node) -> BlockBinding | None:
    """The block-scoped declaration the binding identifier `node` makes; None for a binding of its
    whole function (a parameter, a JS `var`, Python's names, a Go package's names)."""
    target = node
    while target.parent is not None and target.parent.type in PATTERN_TYPES:
        target = target.parent
    holder = target.parent
    if holder is None:
        return None
    where = (holder.type, field_name(target))
    if where == ("variable_declarator", "name"):
        statement = holder.parent
        if statement is None or statement.type != "lexical_declaration" or statement.parent is None:
            return None                                          # `var`
        block = statement.parent
        if block.type in ("switch_case", "switch_default") and block.parent is not None:
            block = block.parent                                 # a case's `let` is the switch body's
        return BlockBinding(node, block, source.start(block), source.end(block))
    if where == ("for_in_statement", "left"):
        kind = holder.child_by_field_name("kind")
        if kind is None or source.node_text(kind) == "var":
            return None
        return BlockBinding(node, holder, source.start(holder), source.end(holder))
    if where == ("catch_clause", "parameter"):
        return BlockBinding(node, holder, source.start(holder), source.end(holder))
    if where == ("let_declaration", "pattern") and holder.parent is not None:
        return BlockBinding(node, holder.parent, source.end(holder), source.end(holder.parent))
    if where == ("let_condition", "pattern"):
        construct = next((a for a in ancestors(holder) if a.type in ("if_expression", "while_expression")), None)
        seen = construct.child_by_field_name("consequence") or construct.child_by_field_name("body") \
            if construct is not None else None
        return BlockBinding(node, construct, source.start(seen), source.end(seen)) if seen is not None else None
    if where == ("for_expression", "pattern"):
        body = holder.child_by_field_name("body")
        return BlockBinding(node, holder, source.start(body), source.end(body)) if body is not None else None
    if where in (("short_var_declaration", "left"), ("var_spec", "name"), ("const_spec", "name")):
        statement = holder if holder.type == "short_var_declaration" else \
            next((a for a in ancestors(holder) if a.type in ("var_declaration", "const_declaration")), None)
        block = statement.parent if statement is not None else None
        if block is None or block.type == "source_file":
            return None                                          # a package's name: the whole file's
        if block.type == "for_clause" and block.parent is not None:
            block = block.parent
        return BlockBinding(node, block, source.end(statement), source.end(block))
    if where == ("range_clause", "left") and holder.parent is not None:
        return BlockBinding(node, holder.parent, source.end(holder), source.end(holder.parent))
    return None


def within(source: Snapshot, inner: tree_sitter.Node, outer: tree_sitter.Node) -> bool:
    return source.start(outer) <= source.start(inner) and source.end(inner) <= source.end(outer)


class Bindings:
    """Which identifiers spelled `name` stand for the one binding a rename starts from, by the
    scope rules of the grammars: a function (lambda, closure, comprehension, Python class body)
    that binds the name itself (a parameter, a local, a nested def, an import) holds another
    thing there, and a name imported from another module is that module's. (Only parameters were
    modelled: a function's rename followed its calls only, and `map(area, xs)`, `key=area`,
    `@area` kept the old name; a variable's rename reached a local of the same name elsewhere.)"""

    def __init__(self, source: Snapshot, name: str, module_name: str | None = None) -> None:
        self.source = source
        self.name = name
        self.module_name = module_name
        self._binds: dict[int, bool] = {}   # scope node id -> whether it binds `name` itself
        self._blocks: dict[int, list[BlockBinding]] | None = None

    def references(self, scope: tree_sitter.Node, new_name: str, own: BlockBinding | None = None) -> list[Outcome]:
        """The edits renaming every reference of `scope`'s own `name` inside `scope`; with `own`,
        of that block-scoped declaration (itself included) in the part of its block that sees it."""
        edits = []
        source, old_name = self.source, self.name
        if own is None:
            nodes = list(word_nodes(source, old_name, source.start(scope), source.end(scope)))
        else:
            nodes = [own.name] if source.node_text(own.name) == old_name else []
            nodes += word_nodes(source, old_name, own.start, own.end)
        for node in nodes:
            if class_member_name(node) or self.import_role(node) not in (None, "self") \
                    or self.shadowed(node, scope if own is None else own.block) \
                    or self.block_shadowed(node, scope, own):
                continue
            edit = self.edit(node, new_name)
            if edit is not None:
                edits.append(edit)
        return edits

    def class_references(self, owner: tree_sitter.Node, new_name: str) -> list[Outcome]:
        """A Python method's name as the class body itself reads it (not its methods, which do
        not see the class's names): `@area.setter`, `alias = area`, and the other definitions
        of the name there (the property's setter, the `@overload` variants)."""
        body = owner.child_by_field_name("body")
        if body is None:
            return []
        edits = []
        for node in word_nodes(self.source, self.name, self.source.start(body), self.source.end(body)):
            scope = self.scope_of(node)
            if scope is None or scope.id != owner.id or self.import_role(node) not in (None, "self"):
                continue
            edit = self.edit(node, new_name)
            if edit is not None:
                edits.append(edit)
        return edits

    def edit(self, node: tree_sitter.Node, new_name: str) -> Outcome | None:
        source, old_name = self.source, self.name
        if node.type in SHORTHAND_TYPES or (node.parent is not None and node.parent.type in SHORTHAND_TYPES):
            # `Rect { width }` / `{ width }`: the field keeps its name, the value is the variable
            return Outcome(source.start(node), source.end(node), f"{old_name}: {new_name}",
                           f"reference to {old_name}", "rename")
        if is_reference(source, node, old_name):
            called = node.parent is not None and node.parent.type in CALL_TYPES and field_name(node) == "function"
            return Outcome(source.start(node), source.end(node), new_name,
                           f"{'call of' if called else 'reference to'} {old_name}", "rename")
        return None

    def shadowed(self, node: tree_sitter.Node, scope: tree_sitter.Node) -> bool:
        """Whether `node` stands, inside `scope`, in a function (comprehension, Python class body)
        that binds the name itself: there the name is that binding. A Python class body's names
        are seen from the body only, not from the functions in it."""
        child, in_function = node, False
        for outer in ancestors(node):
            if outer.id == scope.id:
                return False
            if self.is_scope(outer) and self.own_part(outer, child, node):
                if not (in_function and outer.type == "class_definition") and self.binds(outer):
                    return True
                in_function = in_function or outer.type != "class_definition"
            child = outer
        return False

    @staticmethod
    def is_scope(node: tree_sitter.Node) -> bool:
        return node.type in FUNCTION_TYPES or node.type in COMPREHENSION_TYPES or node.type == "class_definition"

    @staticmethod
    def own_part(scope: tree_sitter.Node, child: tree_sitter.Node, node: tree_sitter.Node) -> bool:
        """Whether `node`, under `scope`'s child `child`, is read in `scope` (its body, its
        parameters' names) rather than in the scope around it (its name, decorators, defaults)."""
        if scope.type in COMPREHENSION_TYPES:
            return True
        part = field_name(child)
        if part not in OWN_SCOPE_FIELDS:
            return False
        if part in ("parameters", "parameter") and child.id != node.id:
            inside = [node, *itertools.takewhile(lambda a: a.id != child.id, ancestors(node))]
            return not any(field_name(a) in NOT_PARAMETER_FIELDS for a in inside)
        return True

    def scope_of(self, node: tree_sitter.Node) -> tree_sitter.Node | None:
        """The innermost scope `node` is read (or bound) in; None for the file's."""
        child = node
        for outer in ancestors(node):
            if self.is_scope(outer) and self.own_part(outer, child, node):
                return outer
            child = outer
        return None

    def binds(self, scope: tree_sitter.Node) -> bool:
        if scope.id not in self._binds:
            parameter = scope.type in FUNCTION_TYPES and declares_parameter(self.source, scope, self.name)
            self._binds[scope.id] = parameter or self.declares_local(scope)
        return self._binds[scope.id]

    def declares_local(self, scope: tree_sitter.Node) -> bool:
        """Whether `scope` binds the name in its own body (not in a scope inside it), and Python's
        `global` / `nonlocal` does not hand it to the scope around."""
        body = scope if scope.type in COMPREHENSION_TYPES else scope.child_by_field_name("body")
        if body is None:
            return False
        found = False
        for node in word_nodes(self.source, self.name, self.source.start(body), self.source.end(body)):
            if node.type not in IDENTIFIER_TYPES and node.type not in SHORTHAND_TYPES:
                continue
            owner = self.scope_of(node)
            if owner is None or owner.id != scope.id:
                continue
            if node.parent is not None and node.parent.type in NOT_LOCAL_TYPES:
                return False
            # a JS `let`, a Rust `let`, a Go `:=` binds in its block (block_shadowed), not the function
            found = found or (self.is_binding(node) and block_binding(self.source, node) is None)
        return found

    def block_bindings(self) -> dict[int, list[BlockBinding]]:
        """The block-scoped declarations of the name in the file, by their block's node id
        (computed once)."""
        if self._blocks is None:
            self._blocks = {}
            for node in word_nodes(self.source, self.name):
                binding = block_binding(self.source, node) \
                    if node.type in IDENTIFIER_TYPES and self.is_binding(node) else None
                if binding is not None:
                    self._blocks.setdefault(binding.block.id, []).append(binding)
        return self._blocks

    def block_shadowed(self, node: tree_sitter.Node, scope: tree_sitter.Node, own: BlockBinding | None = None) -> bool:
        """Whether a block-scoped declaration of the name holds `node` (is it, or sees it) and is
        inner to the rename's binding: one in a block inside `scope` for a binding of `scope`
        (a parameter, a function, a `var`); for the block-scoped `own`, one in a block inside
        own's, or declared after it in its block (Rust's `let area = area + 1;` again). Only the
        blocks around `node` are looked at: a file can declare the name in thousands of blocks."""
        source, blocks = self.source, self.block_bindings()
        at = source.start(node)
        outermost = scope if own is None else own.block
        for block in ancestors(node):
            if own is None and block.id == outermost.id:
                return False
            for binding in blocks.get(block.id, ()):
                if binding.name.id != node.id and not binding.start <= at < binding.end:
                    continue
                if own is None or block.id != own.block.id or source.start(binding.name) > source.start(own.name):
                    return True
            if block.id == outermost.id:
                return False
        return False

    def own_block_binding(self, site: tree_sitter.Node, scope: tree_sitter.Node) -> BlockBinding | None:
        """The block-scoped declaration a renamed variable `site` (new name, in the function
        `scope`) is: the site itself when it declares it, else the innermost declaration of the old
        name whose block sees the site, unless a function between binds the name itself. None:
        the name is the function's (a parameter, a `var`, Python's locals)."""
        if self.is_binding(site):
            return block_binding(self.source, site)
        at = self.source.start(site)
        seeing = [b for bindings in self.block_bindings().values() for b in bindings
                  if b.start <= at < b.end and within(self.source, b.block, scope)]
        if not seeing:
            return None
        own = max(seeing, key=lambda b: (self.source.start(b.block), self.source.start(b.name)))
        return None if self.shadowed(site, own.block) else own

    def is_binding(self, node: tree_sitter.Node) -> bool:
        """Whether the identifier `node` is bound where it stands (declared, imported, or in Python
        assigned). An import of the renamed function from this very file binds the same thing."""
        role = self.import_role(node)
        if role is not None:
            return role == "binds"
        if field_name(node) == "type":
            return False                 # Rust's `Some` in `let Some(x) = ...` names a variant
        target = node
        while target.parent is not None and target.parent.type in PATTERN_TYPES:
            target = target.parent
        return target.parent is not None and (target.parent.type, field_name(target)) in BINDING_FIELDS

    def import_role(self, node: tree_sitter.Node) -> str | None:
        """For a name in an import: "binds" (the name it brings into the scope, another module's
        thing), "self" (a name imported from this very file, `from shapes import area` in
        shapes.py: the renamed function itself), "foreign" (a module path, or another module's
        name imported under an alias); None outside imports."""
        statement = enclosing(node, IMPORT_TYPES)
        if statement is None:
            return None
        parent = node.parent
        holder = parent.parent if parent is not None and parent.type == "dotted_name" else parent
        if holder is None:
            return "binds"
        if holder.type in ("aliased_import", "import_specifier") and holder.child_by_field_name("alias") is not None:
            if field_name(node) == "alias":
                return "binds"
            return "self" if self.imports_self(statement) else "foreign"
        if parent.type == "dotted_name":
            if holder.type == "relative_import" or field_name(parent) == "module_name":
                return "foreign"
            if statement.type == "import_from_statement":
                return "self" if self.imports_self(statement) else "binds"
            return "binds" if parent.named_children[0].id == node.id else "foreign"   # `import a.b` binds `a`
        return "binds"

    def imports_self(self, statement: tree_sitter.Node) -> bool:
        """Whether the Python `from M import ...` imports from this very file (M's last part is
        the file's module name)."""
        module = statement.child_by_field_name("module_name")
        if self.module_name is None or module is None or statement.type != "import_from_statement":
            return False
        return self.source.node_text(module).lstrip(".").rsplit(".", 1)[-1] == self.module_name


def function_renames(new: Snapshot, names: Bindings, function: tree_sitter.Node, new_name: str) -> list[Outcome]:
    """The references that follow a renamed function. A module's or a nested function's: every
    reference of its name in the scope that holds it, calls or not (`map(area, xs)`, `key=area`,
    `@area`), but not where a function there binds the name itself, nor another module's name
    in an import. A method's: `self.old(...)`, `this.old(...)`, `Self::old(...)` in its class, also
    as a value (`key=self.old`; a bare `old()` there is another function), and in a Python class
    body the name as that body reads it; a Rust inherent method's in every impl of its type and
    `S::old`; a JS/TS or Java method's subclasses' `super.old` (and a JS/TS method's accessor pair and
    overload signatures); a Go method's through the receivers of its type's methods
    (go_method_references)."""
    if function.type == "method_declaration" and function.child_by_field_name("receiver") is not None:
        return without_overlaps(go_method_references(new, function, names.name, new_name))
    owner = method_class(function)
    if owner is None:
        scope = enclosing(function, FUNCTION_TYPES) or new.root
        return without_overlaps(names.references(scope, new_name))
    old_name = names.name
    edits = []
    for body in impl_bodies(new, owner):
        edits += receiver_references(new, body, function, old_name, new_name)
    if owner.type == "class_definition":
        edits += names.class_references(owner, new_name)
    if owner.type == "class_body":
        edits += class_member_renames(new, owner, function, old_name, new_name)
        for subclass, overrides in subclass_bodies(new, owner, old_name):
            # `super.old` there is the renamed method; `this.old` too unless the subclass has its own
            edits += receiver_references(new, subclass, function, old_name, new_name,
                                         frozenset({"super"}) if overrides else frozenset({"this", "super"}))
    impl_type = rust_impl_type(new, owner.parent) if owner.type == "declaration_list" else None
    if impl_type is not None and owner.parent.child_by_field_name("trait") is None:
        edits += type_path_references(new, impl_type, old_name, new_name)
    return without_overlaps(edits)


def declares_parameter(source: Snapshot, function: tree_sitter.Node, name: str) -> bool:
    """Whether `function` has a parameter called `name` (a default value or a type that names it
    refers to the name outside, NOT_PARAMETER_FIELDS)."""
    parameters = function.child_by_field_name("parameters") or function.child_by_field_name("parameter")
    if parameters is None:
        return False
    for node in word_nodes(source, name, source.start(parameters), source.end(parameters)):
        if node.type not in IDENTIFIER_TYPES:
            continue
        if node.id == parameters.id:    # an arrow function's bare parameter (`width => width`)
            return True
        inside = [node, *itertools.takewhile(lambda a: a.id != parameters.id, ancestors(node))]
        if not any(field_name(a) in NOT_PARAMETER_FIELDS for a in inside):
            return True
    return False


def class_member_name(node: tree_sitter.Node) -> bool:
    """Whether `node` names a method or a nested class of a class (impl, trait): a member, not
    the variable being renamed (a module variable's rename renamed `User.name()`, the class's
    API, too)."""
    definition = node.parent
    return definition is not None and field_name(node) == "name" and (
        definition.type in FUNCTION_TYPES or definition.type in CLASS_BODY_TYPES) \
        and method_class(definition) is not None


def receiver_references(new: Snapshot, owner: tree_sitter.Node, function: tree_sitter.Node, old_name: str,
                        new_name: str, receivers: frozenset[str] = RECEIVERS) -> list[Outcome]:
    """A method named through its receiver in its class (`owner`): `self.old(...)`,
    `this.old(...)`, `Self::old(...)`, and as a value (`key=self.old`, `.map(Self::old)`) where the
    grammar's access is not a field's (Rust's `self.old` without a call reads a field). Not in a
    class nested in it (its `self`/`this` is another object), nor, in JS/TS, where `this` is not
    the class's: in a `function` (its own `this`), or in a static member for an instance method
    and the other way round (a class may have a static and an instance `area`). In Java also the
    bare `old()` (implicit `this`) and `this::old`; of an overloaded method only the calls whose
    argument count fits it and no overload."""
    edits = []
    static = is_static(function)
    overloads = java_overloads(new, function, old_name)
    for node in word_nodes(new, old_name, new.start(owner), new.end(owner)):
        callee = node.parent
        if callee is not None and callee.type == "method_invocation":
            # Java's call is (object, name, arguments): the name is not its last child. Without an
            # object it is called on `this` (Java has no functions outside classes); it is the
            # renamed method only where `this.old()` is (not in a subclass that overrides it).
            target = callee.child_by_field_name("object")
            if field_name(node) != "name" or (target is None and "this" not in receivers):
                continue
            receiver = "this" if target is None else new.node_text(target)
            arguments = callee.child_by_field_name("arguments")
            if overloads and (arguments is None or not java_calls(function, overloads, parameter_count(arguments))):
                continue                 # another overload's call (Java picks one by its arguments)
            called = True
        else:
            if callee is None or not callee.named_child_count or callee.named_children[-1].id != node.id \
                    or callee.named_children[0].id == node.id:
                continue
            receiver = new.node_text(callee.named_children[0])
            call = callee.parent
            called = call is not None and call.type in CALL_TYPES and field_name(callee) == "function"
            if overloads or not (called or callee.type in RECEIVER_VALUE_TYPES):
                continue                 # an overloaded Java method's `this::old`: its target type picks one
        holder = enclosing(callee, CLASS_BODY_TYPES)
        if receiver not in receivers or holder is None or holder.id != owner.id:
            continue
        if receiver in ("this", "super") and not this_is_the_class(callee, owner, static):
            continue
        edits.append(member_edit(new, node, called, old_name, new_name))
    return edits


def java_overloads(source: Snapshot, function: tree_sitter.Node, old_name: str) -> list[tree_sitter.Node]:
    """The other Java methods called `old_name` in the class body of the renamed `function`: its
    overloads, which `this.old(...)` and `super.old(...)` may call instead (a subclass that has a
    member `old` of its own is reached through `super` only); empty for another language's method."""
    owner = function.parent
    if function.type != "method_declaration" or function.child_by_field_name("receiver") is not None \
            or owner is None:
        return []
    return [m for m in owner.named_children if m.type == "method_declaration" and m.id != function.id
            and (name := m.child_by_field_name("name")) is not None and source.node_text(name) == old_name]


def java_accepts(method: tree_sitter.Node, count: int) -> bool:
    """Whether a call with `count` arguments fits the Java `method`'s parameters (varargs: any
    number from the fixed ones up)."""
    parameters = method.child_by_field_name("parameters")
    if parameters is None:
        return False
    fixed = [p for p in parameters.named_children if p.type == "formal_parameter"]
    if any(p.type == "spread_parameter" for p in parameters.named_children):
        return count >= len(fixed)
    return count == len(fixed)


def java_calls(function: tree_sitter.Node, overloads: list[tree_sitter.Node], count: int) -> bool:
    """Whether a call with `count` arguments is the renamed `function`'s: it fits it and no
    overload (an overload of the same arity differs in types, which are not resolved here)."""
    return java_accepts(function, count) and not any(java_accepts(m, count) for m in overloads)


def member_edit(new: Snapshot, node: tree_sitter.Node, called: bool, old_name: str, new_name: str) -> Outcome:
    return Outcome(new.start(node), new.end(node), new_name,
                   f"{'call of' if called else 'reference to'} {old_name}", "rename")


def is_static(member: tree_sitter.Node) -> bool:
    """Whether a JS/TS class member is `static` (a static block is)."""
    return member.type == "class_static_block" or any(c.type == "static" for c in member.children)


def this_is_the_class(node: tree_sitter.Node, owner: tree_sitter.Node, static: bool) -> bool:
    """Whether `this` (`super`) at `node`, in the class body `owner`, is what a member `static` or
    not is called on: the member `node` stands in is the class body's own, with that staticness,
    and no `function` between gives `this` another value. (Java has none of these members: there
    the class body is reached.)"""
    for outer in ancestors(node):
        if outer.id == owner.id:
            return True
        if outer.type in OWN_THIS_TYPES:
            return False
        if outer.type in CLASS_MEMBER_TYPES:
            return outer.parent is not None and outer.parent.id == owner.id and is_static(outer) == static
    return False


def class_members(source: Snapshot, body: tree_sitter.Node) -> list[tuple[tree_sitter.Node, tree_sitter.Node]]:
    """(member, its name) for the named members of a JS/TS class body: methods, fields, signatures."""
    members = []
    for member in body.named_children:
        name = member.child_by_field_name("name") or member.child_by_field_name("property")
        if name is not None:
            members.append((member, name))
    return members


def class_member_renames(new: Snapshot, owner: tree_sitter.Node, function: tree_sitter.Node, old_name: str,
                         new_name: str) -> list[Outcome]:
    """The JS/TS members that a method's rename renames with it: its accessor pair's other half
    (`get size()` / `set size(v)`) and its TypeScript overload signatures (`area(): number;`),
    those of the same name and staticness."""
    return [Outcome(new.start(name), new.end(name), new_name, f"reference to {old_name}", "rename")
            for member, name in class_members(new, owner)
            if member.id != function.id and member.type in METHOD_MEMBER_TYPES
            and new.node_text(name) == old_name and is_static(member) == is_static(function)]


def class_name(source: Snapshot, body: tree_sitter.Node) -> str | None:
    """The name of the JS/TS class whose body is `body` (`const A = class {...}` names it too)."""
    definition = body.parent
    if definition is None:
        return None
    name = definition.child_by_field_name("name")
    if name is None and definition.parent is not None and definition.parent.type == "variable_declarator":
        name = definition.parent.child_by_field_name("name")
    return source.node_text(name) if name is not None else None


def subclass_bodies(source: Snapshot, owner: tree_sitter.Node, old_name: str) -> list[tuple[tree_sitter.Node, bool]]:
    """(body, whether it has its own member `old_name`) of the JS/TS and Java classes in the file
    that extend the class of `owner` by name (`class Square extends Shape`)."""
    name = class_name(source, owner)
    if name is None:
        return []
    bodies = []
    for node in word_nodes(source, name):
        heritage = node.parent
        if heritage is not None and heritage.type == "generic_type" and heritage.named_children[0].id == node.id:
            heritage = heritage.parent                       # java: `extends Shape<T>`
        if heritage is not None and heritage.type == "extends_clause" and field_name(node) == "value":
            heritage = heritage.parent                       # typescript: class_heritage > extends_clause
        elif heritage is None or heritage.type not in HERITAGE_TYPES:
            continue
        definition = heritage.parent if heritage is not None and heritage.type in HERITAGE_TYPES else None
        body = definition.child_by_field_name("body") if definition is not None else None
        if body is not None and body.id != owner.id:
            overrides = any(source.node_text(n) == old_name for _, n in class_members(source, body))
            bodies.append((body, overrides))
    return bodies


def rust_impl_type(source: Snapshot, impl: tree_sitter.Node | None) -> str | None:
    """The name of the type a Rust `impl` is for (`S` for `impl S`, `impl<T> S<T>`, `impl Tr for S`)."""
    if impl is None or impl.type != "impl_item":
        return None
    kind = impl.child_by_field_name("type")
    while kind is not None and kind.type in ("generic_type", "scoped_type_identifier"):
        kind = kind.child_by_field_name("type") or kind.child_by_field_name("name")
    return source.node_text(kind) if kind is not None and kind.type == "type_identifier" else None


def impl_bodies(source: Snapshot, owner: tree_sitter.Node) -> list[tree_sitter.Node]:
    """Where a method of the class (impl) `owner` is named through its receiver: the class itself;
    for a method of a Rust inherent impl (`impl S`, no trait), every impl of that type in the file
    (`self.old()` in `impl Display for S` calls it too). A trait impl's method is the trait's:
    its own block only."""
    impl = owner.parent
    name = rust_impl_type(source, impl) if owner.type == "declaration_list" else None
    if name is None or impl.child_by_field_name("trait") is not None:
        return [owner]
    bodies = [body for other in rust_impls(source, name) if (body := other.child_by_field_name("body")) is not None]
    return bodies or [owner]


def rust_impls(source: Snapshot, name: str) -> list[tree_sitter.Node]:
    """The Rust impls in the file for the type `name`."""
    impls = []
    for node in word_nodes(source, name):
        holder = node.parent
        if node.type != "type_identifier" or holder is None:
            continue
        if holder.type in ("generic_type", "scoped_type_identifier"):
            holder = holder.parent
        if holder is not None and holder.type == "impl_item" and rust_impl_type(source, holder) == name \
                and all(impl.id != holder.id for impl in impls):
            impls.append(holder)
    return impls


def type_path_references(source: Snapshot, type_name: str, old_name: str, new_name: str) -> list[Outcome]:
    """A Rust inherent method named through its type's path anywhere in the file (`S::old(s)`,
    `.map(S::old)`); another type's `R::old` is another method."""
    edits = []
    for node in word_nodes(source, old_name):
        path = node.parent
        if path is None or path.type != "scoped_identifier" or field_name(node) != "name":
            continue
        prefix = path.child_by_field_name("path")
        if prefix is None or source.node_text(prefix) != type_name:
            continue
        call = path.parent
        called = call is not None and call.type in CALL_TYPES and field_name(path) == "function"
        edits.append(member_edit(source, node, called, old_name, new_name))
    return edits


def go_receiver(source: Snapshot, method: tree_sitter.Node) -> tuple[str | None, str | None]:
    """(receiver name, receiver type name) of a Go method: ("s", "S") for `func (s *S[T]) ...`;
    the name is None for `func (S) ...` or `func (_ S) ...`."""
    receiver = method.child_by_field_name("receiver")
    declaration = next((c for c in receiver.named_children if c.type == "parameter_declaration"), None) \
        if receiver is not None else None
    if declaration is None:
        return None, None
    name = declaration.child_by_field_name("name")
    kind = declaration.child_by_field_name("type")
    while kind is not None and kind.type in ("pointer_type", "generic_type", "parenthesized_type"):
        kind = kind.child_by_field_name("type") or (kind.named_children[-1] if kind.named_child_count else None)
    receiver_name = source.node_text(name) if name is not None else None
    return (None if receiver_name == "_" else receiver_name,
            source.node_text(kind) if kind is not None and kind.type == "type_identifier" else None)


def go_methods(source: Snapshot, type_name: str) -> list[tree_sitter.Node]:
    """The Go methods in the file whose receiver is `type_name` (or a pointer to it)."""
    return [node for node in source.root.named_children
            if node.type == "method_declaration" and go_receiver(source, node)[1] == type_name]


def go_method_references(new: Snapshot, function: tree_sitter.Node, old_name: str, new_name: str) -> list[Outcome]:
    """A Go method named through a receiver of its type: `s.Old()` and the method value `s.Old`
    in every method of the type where `s` is that method's receiver (not where a closure's
    parameter or a block's `s :=` rebinds it), and the method expressions `S.Old`, `(*S).Old`.
    Another receiver's `r.Old` is another type's method, and a bare `Old()` a function."""
    type_name = go_receiver(new, function)[1]
    if type_name is None:
        return []
    edits = []
    bindings: dict[str, Bindings] = {}   # one per receiver name: most methods of a type share it
    for method in go_methods(new, type_name):
        receiver = go_receiver(new, method)[0]
        body = method.child_by_field_name("body")
        if receiver is None or body is None:
            continue
        names = bindings.setdefault(receiver, Bindings(new, receiver))
        for node in word_nodes(new, old_name, new.start(body), new.end(body)):
            selector = selector_of(node)
            operand = selector.child_by_field_name("operand") if selector is not None else None
            if operand is None or operand.type != "identifier" or new.node_text(operand) != receiver \
                    or names.shadowed(operand, method) or names.block_shadowed(operand, method):
                continue
            edits.append(member_edit(new, node, called_selector(selector), old_name, new_name))
    for node in word_nodes(new, old_name):
        selector = selector_of(node)
        operand = selector.child_by_field_name("operand") if selector is not None else None
        while operand is not None and operand.type in ("parenthesized_expression", "unary_expression"):
            if operand.type == "unary_expression" and new.node_text(operand)[:1] != "*":
                break
            operand = operand.child_by_field_name("operand") or operand.named_children[-1]
        if operand is not None and operand.type in ("identifier", "type_identifier") \
                and new.node_text(operand) == type_name:
            edits.append(member_edit(new, node, called_selector(selector), old_name, new_name))
    return edits


def selector_of(node: tree_sitter.Node) -> tree_sitter.Node | None:
    """The Go selector `x.Name` whose member `node` is."""
    selector = node.parent
    if node.type == "field_identifier" and selector is not None and selector.type == "selector_expression" \
            and field_name(node) == "field":
        return selector
    return None


def called_selector(selector: tree_sitter.Node) -> bool:
    call = selector.parent
    return call is not None and call.type in CALL_TYPES and field_name(selector) == "function"


def member_names(source: Snapshot, name: tree_sitter.Node) -> set[str]:
    """When `name` is the name of a method: the names of its class's other members that
    `has_name` does not see (they are no variables). A Go type's methods and struct fields, a JS/TS
    class's members, the functions of a Rust type's impls; empty otherwise."""
    function = declared_function(name)
    if function is None:
        return set()
    if function.type == "method_declaration" and function.child_by_field_name("receiver") is not None:
        type_name = go_receiver(source, function)[1]
        if type_name is None:
            return set()
        names = {source.node_text(m.child_by_field_name("name")) for m in go_methods(source, type_name)
                 if m.child_by_field_name("name") is not None}
        return names | go_fields(source, type_name)
    owner = method_class(function)
    if owner is None:
        return set()
    if owner.type == "class_body":
        return {source.node_text(n) for _, n in class_members(source, owner)}
    if owner.type != "declaration_list":
        return set()                     # a Python class: its `def`s are variables of its body (has_name)
    names = set()
    for body in impl_bodies(source, owner):
        for item in body.named_children:
            item_name = item.child_by_field_name("name") if item.type == "function_item" else None
            if item_name is not None:
                names.add(source.node_text(item_name))
    return names


def go_fields(source: Snapshot, type_name: str) -> set[str]:
    """The field names of the Go struct `type_name` declared in the file."""
    fields = set()
    for node in word_nodes(source, type_name):
        spec = node.parent
        if node.type != "type_identifier" or spec is None or spec.type != "type_spec" or field_name(node) != "name":
            continue
        struct = spec.child_by_field_name("type")
        if struct is None or struct.type != "struct_type":
            continue
        for declaration in (n for n in walk(struct) if n.type == "field_declaration"):
            fields.update(source.node_text(n) for n in declaration.children_by_field_name("name"))
    return fields


def documentation_word(name: str) -> re.Pattern:
    """Where a function's documentation mentions the parameter `name`: as a whole word, or for
    a very short name (`a`, `x`) only where the text marks it as a name."""
    word = re.escape(name)
    if len(name) > SHORT_NAME_CHARS:
        return re.compile(rf"(?<!\w){word}(?!\w)")
    return re.compile(rf"(?<=`){word}(?=`)|(?<=:param ){word}(?=:)|(?<=@param ){word}(?!\w)")


def without_overlaps(edits: list[Outcome]) -> list[Outcome]:
    """The edits in document order, an edit overlapping an earlier one dropped: an f-string
    docstring's `{width}` is both a reference and a mention, and a client refuses a WorkspaceEdit
    whose edits overlap."""
    kept: list[Outcome] = []
    for edit in sorted(edits, key=lambda e: (e.start, not e.label.startswith("reference"))):   # the reference first
        if kept and edit.start < kept[-1].end:
            continue
        kept.append(edit)
    return kept


def callee_name(source: Snapshot, call: tree_sitter.Node) -> str | None:
    """`f` for f(...), obj.f(...) and Self::f(...)."""
    callee = call.child_by_field_name("function") or call.child_by_field_name("name")
    if callee is None:
        return None
    last = callee.named_children[-1] if callee.named_child_count else callee
    return source.node_text(last)


def keyword_arguments(new: Snapshot, function: str | None, old_name: str, new_name: str) -> list[Outcome]:
    """`f(old=...)` -> `f(new=...)` at the calls of the function whose parameter was renamed."""
    if function is None:
        return []
    edits = []
    for node in word_nodes(new, old_name):
        argument = node.parent
        if argument is None or argument.type != "keyword_argument" or field_name(node) != "name":
            continue
        call = argument.parent.parent if argument.parent is not None else None
        if call is not None and call.type in CALL_TYPES and callee_name(new, call) == function:
            edits.append(Outcome(new.start(node), new.end(node), new_name, f"keyword argument of {function}", "rename"))
    return edits


def call_sites(new: Snapshot, change: Change, line_tokens: int) -> list[Site]:
    """The argument lists of every call of the changed function, as sites for the model."""
    sites = []
    for name in word_nodes(new, change.new_name):
        # f(...), obj.f(...), Self::f(...): the name is the callee or the callee's last part
        callee = name if name.parent is not None and name.parent.type in CALL_TYPES else name.parent
        call = callee.parent if callee is not None else None
        if call is None or call.type not in CALL_TYPES:
            continue
        if callee is not name and (not callee.named_child_count or callee.named_children[-1].id != name.id):
            continue
        function = call.child_by_field_name("function") or call.child_by_field_name("name")
        arguments = call.child_by_field_name("arguments")
        if function is None or function.id != callee.id or arguments is None \
                or arguments.type not in ARGUMENT_LIST_TYPES:
            continue
        start, end = new.start(arguments) + 1, new.end(arguments) - 1
        if end < start or new.text[end:end + 1] != ")":
            continue
        sites.append(Site(
            start=start, end=end, label=f"call site of {change.new_name}",
            single_line="\n" not in new.line_view.text[start:end], max_tokens=line_tokens,
            owner_type=arguments.type, owner_start=new.start(arguments), outer_start=new.start(arguments),
        ))
    return sites


def plan_next_edits(
    history: list[str], current: str, language_id: str, line_tokens: int = 32, near: tuple[int, int] | None = None,
    tree=None, module_name: str | None = None,
) -> NextEditsPlan | None:
    """The newest earlier version from which the current text differs by one recognised change
    that has related sites to update; None when there is none.

    Renames between an identifier and a prefix of it ("s" -> "size") are tried last: they are
    usually the half-typed name, not the name before the change. `near`: [start, end] of the
    cursor's line; only a change that touches it counts. `module_name`: the file's module name
    (`shapes` for shapes.py), which a Python import of a renamed function from the file itself
    names."""
    new = Snapshot.parse(current, language_id, tree)
    if new.tree is None:
        return None
    found = [detect_change(earlier, new) for earlier in history]
    for allow_prefix_renames in (False, True):
        for change in filter(None, found):
            if change.kind == "rename" and not allow_prefix_renames and (
                change.new_name.startswith(change.old_name) or change.old_name.startswith(change.new_name)
            ):
                continue
            if near is not None and not (change.start <= near[1] and near[0] <= change.end):
                continue
            if change.kind == "rename":
                edits = rename_edits(new, change, module_name)
                if edits:
                    return NextEditsPlan(change, renames=edits)
            else:
                sites = call_sites(new, change, line_tokens)
                if change.kind == "call":
                    # the other calls follow the changed one, and so does the definition; a call
                    # around the changed one (`mul(mul(1, 2, 3), 4)`) would mask the user's edit
                    sites = [s for s in sites if not (s.start <= change.end and change.start <= s.end)]
                    sites = sites + definition_sites(new, change, line_tokens)
                sites = innermost(sites)
                if sites:
                    return NextEditsPlan(change, sites=sites)
    return None


def innermost(sites: list[Site]) -> list[Site]:
    """The sites in document order, without those that hold another (`add(add(1, 2), 3)`: the
    outer argument list holds the inner one). Masked sites may not overlap; the inner call keeps
    its text only if the outer list is left alone, and the outer call is offered again once the
    inner one is filled."""
    ordered = sorted(sites, key=lambda s: (s.start, -s.end))
    # a site that holds another comes before it in this order (same start: the longer first)
    return [s for i, s in enumerate(ordered) if not any(o.end <= s.end for o in ordered[i + 1:] if o.start < s.end)]


def definition_sites(new: Snapshot, change: Change, line_tokens: int) -> list[Site]:
    """The parameter lists of the functions named like the changed call, when their parameter
    count does not match the call's new argument count."""
    sites = []
    for name in word_nodes(new, change.new_name):
        function = name.parent
        if function is None or function.type not in FUNCTION_TYPES or field_name(name) != "name":
            continue
        parameters = function.child_by_field_name("parameters")
        if parameters is None or parameter_count(parameters) == change.new_count:
            continue
        start, end = new.start(parameters) + 1, new.end(parameters) - 1
        if end < start or new.text[end:end + 1] != ")":
            continue
        sites.append(Site(
            start=start, end=end, label=f"parameters of {change.new_name}",
            single_line="\n" not in new.line_view.text[start:end], max_tokens=line_tokens,
            owner_type=parameters.type, owner_start=new.start(parameters), outer_start=new.start(parameters),
        ))
    return sites
