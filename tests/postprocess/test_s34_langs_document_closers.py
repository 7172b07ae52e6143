"""A completion right before a closer the line already has, which it writes again: the `>` of a
C / C++ header name (`#include <‸>` + `stdio.h> // io` showed `#include <stdio.h> // io>`, and
before a comment, `#include <‸> // io` + `stdio.h>`, nothing was shown), and a JSX element's
closing tag (`<div>‸</div>` + `hello</div>` was refused: the overlap `</div>` is no closing
punctuation, a partial match of the line's `</div>;` was never trimmed, and the doubled tag broke
the file). The tree says where the cursor is (a `system_lib_string`, a `jsx_element`'s
children); the completion is cut where it writes the closer, as for a type argument list's `>`.

Real tree-sitter, the real pipeline (plan, post-processing); the model's answer is written by hand."""
import pytest

from dllm_lsp import pipeline
from dllm_lsp.engine.types import InfillResult
from dllm_lsp.syntax.snapshot import Snapshot

CURSOR = "‸"


def shown_file(language_id: str, source: str, answer: str) -> str | None:
    text, cursor = source.replace(CURSOR, ""), source.index(CURSOR)
    plan = pipeline.plan(Snapshot.parse(text, language_id), cursor)
    assert plan.span.single_line
    shown = plan.finish(InfillResult([[answer]], steps=1, tokens_committed=1, latency_ms=0.0))
    return None if shown is None else text[:shown.start] + shown.text + text[shown.end:]


INCLUDES = [
    # (language, source, the model's answer, the file shown)
    ("c", "#include <‸>\n", "stdio.h>", "#include <stdio.h>\n"),
    ("cpp", "#include <‸>\nint main() {}\n", "vector>", "#include <vector>\nint main() {}\n"),
    ("c", "#include <sys/‸>\n", "types.h>\n#include <stdlib.h>", "#include <sys/types.h>\n"),
    ("c", "#include <std‸>\n", "stdio.h>", "#include <stdio.h>\n"),                  # a word typed halfway
    # what the model writes after the header name's `>` is cut with it: a comment at most
    ("c", "#include <‸>\n", "stdio.h> // io", "#include <stdio.h>\n"),
    ("cpp", "#include <‸>\n", "string>>", "#include <string>\n"),
    # the line has more after its `>`
    ("c", "#include <‸> // io\n", "stdio.h>", "#include <stdio.h> // io\n"),
    ("cpp", "int main() {\n#include <‸> // io\n}\n", "cstdio> // io", "int main() {\n#include <cstdio> // io\n}\n"),
    # a header name the model does not close: as it wrote it
    ("c", "#include <‸>\n", "stdio.h", "#include <stdio.h>\n"),
]


@pytest.mark.parametrize("language_id, source, answer, expected", INCLUDES, ids=[f"{c[0]}-{c[2]!r}" for c in INCLUDES])
def test_a_header_names_closer_is_not_written_twice(language_id, source, answer, expected):
    assert shown_file(language_id, source, answer) == expected


JSX = "const A = () => <div>‸</div>;\n"
TAGS = [
    ("typescriptreact", JSX, "hello</div>", "const A = () => <div>hello</div>;\n"),
    ("typescriptreact", "function A() {\n  return <div>‸</div>;\n}\n", "hello</div>;",
     "function A() {\n  return <div>hello</div>;\n}\n"),
    ("javascriptreact", JSX, "hello</div>", "const A = () => <div>hello</div>;\n"),
    ("javascript", JSX, "hello</div>", "const A = () => <div>hello</div>;\n"),
    # its own elements keep their closing tags: only the one that closes nothing of its own is the line's
    ("typescriptreact", JSX, "<b>hi</b></div>", "const A = () => <div><b>hi</b></div>;\n"),
    ("typescriptreact", JSX, "<div>hi</div></div>", "const A = () => <div><div>hi</div></div>;\n"),
    ("typescriptreact", JSX, "hello<br/></div>", "const A = () => <div>hello<br/></div>;\n"),
    ("typescriptreact", "const A = () => <>‸</>;\n", "hello</>", "const A = () => <>hello</>;\n"),
    ("typescriptreact", "const A = () => <Foo.Bar>‸</Foo.Bar>;\n", "hi</Foo.Bar>",
     "const A = () => <Foo.Bar>hi</Foo.Bar>;\n"),
    ("typescriptreact", "const A = () => <p>Don't ‸</p>;\n", "stop</p>", "const A = () => <p>Don't stop</p>;\n"),
    # no closing tag written: as before
    ("typescriptreact", JSX, "hello", "const A = () => <div>hello</div>;\n"),
]


@pytest.mark.parametrize("language_id, source, answer, expected", TAGS, ids=[f"{c[0]}-{c[2]!r}" for c in TAGS])
def test_a_jsx_closing_tag_the_line_has_is_not_written_twice(language_id, source, answer, expected):
    assert shown_file(language_id, source, answer) == expected


@pytest.mark.parametrize("answer", ["hello</div><p/>", "hello</div>; // done"])
def test_a_jsx_element_closed_and_gone_on_from_is_not_shown(answer):
    # as for a type argument list: the line's own `</div>` would close nothing
    assert shown_file("typescriptreact", JSX, answer) is None
