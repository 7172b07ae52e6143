"""What the editors should show and insert, computed from the server's own answer."""
from __future__ import annotations

import re

# The same chunking as editors/nvim/lua/dllm/partial.lua (Lua's %w and %s are ASCII classes).
_WORD = re.compile(r"[ \t\n\r\f\v]*[A-Za-z0-9_]+|[ \t\n\r\f\v]*[^A-Za-z0-9_ \t\n\r\f\v]+|[ \t\n\r\f\v]+")


def word(text: str) -> str:
    match = _WORD.match(text)
    return match.group(0) if match else text


def line(text: str) -> str:
    nl = text.find("\n")
    if nl < 0:
        return text
    if nl == 0:
        second = text.find("\n", 1)
        return text if second < 0 else text[:second]
    return text[:nl]


def ghost_of(answer: dict, line_text: str, cursor_col: int) -> str:
    """The part of the server's completion still to insert at the cursor (what ghost text shows)."""
    start = answer["replace_from"]["col"] - 1
    typed = line_text[start:cursor_col]
    completion = answer["completion"]
    assert completion.startswith(typed), (completion, typed)
    return completion[len(typed):]


def leading_printable(text: str) -> str:
    """The printable-ASCII start of `text`: a random model's text may hold control or replacement
    characters, which terminals and browsers draw their own way."""
    return re.match(r"[ -~]*", text).group(0)
