"""LSP language ids -> tree-sitter grammars (one wheel per language), plus the per-language facts
the planner needs (comment syntax, default indentation, which nodes are blocks).

Languages and parsers are cached: building a Language is cheap but not free, and a Parser is
reused per thread (tree-sitter parsers are not safe to share between threads).
"""
from __future__ import annotations

import functools
import importlib
import os
import threading
from dataclasses import dataclass

import tree_sitter

# languageId -> (grammar module, function returning the language pointer, our canonical name)
_GRAMMARS: dict[str, tuple[str, str, str]] = {
    "python": ("tree_sitter_python", "language", "python"),
    "javascript": ("tree_sitter_javascript", "language", "javascript"),
    "javascriptreact": ("tree_sitter_javascript", "language", "javascript"),
    "typescript": ("tree_sitter_typescript", "language_typescript", "typescript"),
    "typescriptreact": ("tree_sitter_typescript", "language_tsx", "tsx"),
    "rust": ("tree_sitter_rust", "language", "rust"),
    "go": ("tree_sitter_go", "language", "go"),
    "c": ("tree_sitter_c", "language", "c"),
    "cpp": ("tree_sitter_cpp", "language", "cpp"),
    "java": ("tree_sitter_java", "language", "java"),
    "lua": ("tree_sitter_lua", "language", "lua"),
}

# Names people (and the CLI's --language) use for the same ids.
_ALIASES = {"tsx": "typescriptreact", "jsx": "javascriptreact", "c++": "cpp", "py": "python",
            "js": "javascript", "ts": "typescript", "rs": "rust", "golang": "go"}

_EXTENSIONS = {
    ".py": "python", ".pyi": "python", ".pyw": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascriptreact",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "typescriptreact",
    ".rs": "rust", ".go": "go", ".c": "c", ".h": "c",
    ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".c++": "cpp", ".hpp": "cpp", ".hh": "cpp",
    ".hxx": "cpp", ".h++": "cpp", ".ipp": "cpp", ".inl": "cpp",
    ".java": "java", ".lua": "lua",
}


@dataclass(frozen=True)
class LanguageFacts:
    """What the line rules and post-processing need to know about a language."""

    name: str                       # canonical grammar name ("tsx" for typescriptreact), "text" if unknown
    line_comment: str | None        # used to prepend snippets from other files; None: no snippets
    indent_unit: str                # default when the file itself does not show one
    indent_sensitive: bool          # a dedent ends a block (Python)
    header_keywords: tuple[str, ...] = ()   # a line ending in one of these opens a block (Lua)


_FACTS = {
    "python": LanguageFacts("python", "#", "    ", True),
    "javascript": LanguageFacts("javascript", "//", "  ", False),
    "typescript": LanguageFacts("typescript", "//", "  ", False),
    "tsx": LanguageFacts("tsx", "//", "  ", False),
    "rust": LanguageFacts("rust", "//", "    ", False),
    "go": LanguageFacts("go", "//", "\t", False),
    "c": LanguageFacts("c", "//", "    ", False),
    "cpp": LanguageFacts("cpp", "//", "    ", False),
    "java": LanguageFacts("java", "//", "    ", False),
    "lua": LanguageFacts("lua", "--", "  ", False, ("then", "do", "else", "repeat")),
}
_UNKNOWN = LanguageFacts("text", None, "    ", False)


def normalize_language_id(language_id: str) -> str:
    if not isinstance(language_id, str):
        raise TypeError(f"language id must be a string, got {type(language_id).__name__}")
    lowered = language_id.strip().lower()
    return _ALIASES.get(lowered, lowered)


def language_name(language_id: str) -> str | None:
    """Canonical grammar name for a languageId ("tsx" for typescriptreact), None when unsupported."""
    entry = _GRAMMARS.get(normalize_language_id(language_id))
    return entry[2] if entry else None


def facts_for(language_id: str) -> LanguageFacts:
    name = language_name(language_id)
    return _FACTS[name] if name else _UNKNOWN


@functools.lru_cache(maxsize=None)
def _language(name: str) -> tree_sitter.Language:
    for module_name, function, canonical in _GRAMMARS.values():
        if canonical == name:
            return tree_sitter.Language(getattr(importlib.import_module(module_name), function)())
    raise KeyError(name)


def grammar_for(language_id: str) -> tree_sitter.Language | None:
    """The tree-sitter Language for an LSP languageId, None for languages without a grammar."""
    name = language_name(language_id)
    return _language(name) if name else None


_local = threading.local()


def parser_for(language_id: str) -> tree_sitter.Parser | None:
    """A cached Parser for this thread, None for languages without a grammar."""
    name = language_name(language_id)
    if name is None:
        return None
    parsers = getattr(_local, "parsers", None)
    if parsers is None:
        parsers = _local.parsers = {}
    parser = parsers.get(name)
    if parser is None:
        parser = parsers[name] = tree_sitter.Parser(_language(name))
    return parser


def language_id_for_path(path: str | os.PathLike) -> str:
    """Guess the LSP languageId from a file name; "plaintext" when the extension is unknown."""
    name = os.fspath(path).lower()
    _, ext = os.path.splitext(name)
    return _EXTENSIONS.get(ext, "plaintext")
