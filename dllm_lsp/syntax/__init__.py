"""Text and its tree-sitter tree, in Python string offsets: the one type the planner, the
post-processing and the multi-site features share.

snapshot.py   Snapshot: a text, its UTF-8 bytes and its tree at one version (immutable)
document.py   ParsedDocument: a document kept in step with edits, reparsed incrementally
nodes.py      tree walking and error counting (ERROR and MISSING nodes, hidden ones included)
languages.py  LSP language ids -> grammars, parsers and per-language facts
"""
from .document import ParsedDocument
from .nodes import count_errors
from .snapshot import Snapshot

__all__ = ["ParsedDocument", "Snapshot", "count_errors"]
