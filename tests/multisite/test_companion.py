"""Companion import slot: request layout, validation of the model's import, insertion point."""
from __future__ import annotations

import pytest

from dllm_lsp.engine.types import InfillRequest, InfillResult, StepState
from dllm_lsp.multisite.companion import (
    companion_edit,
    import_edit,
    imported_names,
    is_valid_import,
    with_companion_slot,
)
from dllm_lsp.options import Options
from dllm_lsp.pipeline import Completion, plan
from dllm_lsp.syntax.snapshot import Snapshot

FILES = {
    "python": ("import os\n\n\ndef f():\n    return \n", "import sys", "from os import path"),
    "typescript": ('import { a } from "a";\n\nconst x = ;\n', 'import { b } from "b";', 'import * as fs from "fs";'),
    "rust": ("use std::io;\n\nfn main() {\n    let x = ;\n}\n", "use std::fmt;", "use std::collections::HashMap;"),
}
# A completion that uses every name the imports above bring in.
USES_ALL = "sys.argv, path.join(b, fs.readFileSync(fmt::Debug), HashMap::new())"


def cursor_request(text: str, marker: str) -> tuple[InfillRequest, int]:
    cursor = text.index(marker) + len(marker)
    return InfillRequest.single(text[:cursor], text[cursor:], 16), cursor


@pytest.mark.parametrize("language", sorted(FILES))
def test_companion_slot_sits_after_the_imports(language):
    text, new_import, _ = FILES[language]
    request, cursor = cursor_request(text, "return " if language == "python" else "x = ")
    slot = with_companion_slot(request, Snapshot.parse(text, language), cursor)
    assert slot is not None
    first_line_end = text.index("\n") + 1
    assert slot.offset == first_line_end
    assert slot.request.pieces == [text[:first_line_end], text[first_line_end:cursor], text[cursor:]]
    assert slot.request.slots[0].single_line and slot.request.slots[1:] == request.slots
    result = InfillResult([[new_import, "1"]], steps=2, tokens_committed=3, latency_ms=1.0)
    assert slot.main_result(result).text == "1"
    state = StepState(1, 2, [[new_import, "1"]], 0.5, 0)
    assert slot.main_state(state).slot_texts == [["1"]]
    assert slot.edit(result, Snapshot.parse(text, language), "1") is None      # uses nothing it imports
    edit = slot.edit(result, Snapshot.parse(text, language), USES_ALL)
    assert edit is not None and edit.offset == first_line_end and edit.text == new_import + "\n"
    patched = text[:edit.offset] + edit.text + text[edit.offset:]
    assert Snapshot.parse(patched, language).root.named_children[1].type in ("import_statement", "use_declaration",
                                                                     "import_from_statement")


@pytest.mark.parametrize("language", sorted(FILES))
def test_invalid_or_duplicate_imports_give_no_edit(language):
    text, _, other_import = FILES[language]
    existing = text.split("\n")[0]
    for slot_text in ["", "   ", "return 1", "import (", "hello world", "x = 1;", existing, "fn main() {}"]:
        assert companion_edit(slot_text, Snapshot.parse(text, language), USES_ALL) is None, slot_text
        assert import_edit(slot_text, Snapshot.parse(text, language)) is None, slot_text
    assert companion_edit(other_import, Snapshot.parse(text, language), USES_ALL) is not None
    assert import_edit(other_import, Snapshot.parse(text, language)) is not None


def test_import_validation_per_language():
    assert is_valid_import("import os.path", "python")
    assert is_valid_import('#include <stdio.h>', "c")
    assert is_valid_import('import "fmt"', "go")
    assert not is_valid_import("import os; import sys", "python")   # two statements
    assert not is_valid_import("import os", "lua")                  # no imports known for Lua
    assert not is_valid_import("use std::io", "rust")               # missing semicolon


def test_no_companion_when_cursor_is_in_the_import_block_or_prefix_is_cut():
    text, _, _ = FILES["python"]
    request, cursor = cursor_request(text, "import ")
    assert with_companion_slot(request, Snapshot.parse(text, "python"), cursor) is None
    request, cursor = cursor_request(text, "return ")
    cut = InfillRequest.single(text[15:cursor], text[cursor:], 16)   # the planner dropped the imports
    assert with_companion_slot(cut, Snapshot.parse(text, "python"), cursor) is None


def test_file_without_imports_gets_the_import_after_its_header():
    text = '"""Module doc."""\n# note\n\ndef f():\n    pass\n'
    edit = import_edit("import os", Snapshot.parse(text, "python"))
    assert edit is not None and edit.offset == text.index("# note\n") + len("# note\n")
    edit = import_edit("use std::io;", Snapshot.parse("//! Crate docs.\nfn main() {}\n", "rust"))
    assert edit is not None and edit.offset == len("//! Crate docs.\n")


def test_far_from_the_imports_the_canvas_keeps_the_imports_and_the_text_before_the_cursor():
    body = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(300))
    text = "import os\nimport re\n\n\n" + body + "y = "
    cursor = len(text)
    planner_prefix = text[cursor - 4500:cursor]          # the planner cut the imports off
    request = InfillRequest.single(planner_prefix, "", 16)
    slot = with_companion_slot(request, Snapshot.parse(text, "python"), cursor)
    assert slot is not None and slot.offset == len("import os\nimport re\n")
    head, between = slot.request.pieces[0], slot.request.pieces[1]
    assert head == "import os\nimport re\n"
    assert text.endswith(between) and len(between) <= 2048
    assert text[len(text) - len(between) - 1] == "\n"   # it starts at a line start
    # typing on keeps the cut where it was (the context cache keeps matching)
    typed = text + "f"
    again = with_companion_slot(InfillRequest.single(typed[cursor + 1 - 4500:], "", 16), Snapshot.parse(typed, "python"),
                                cursor + 1)
    assert again.request.pieces[1] == between + "f"


# (statement, grammar name, the names it brings in)
NAMES = [
    ("import numpy as np", "python", {"np"}),
    ("import os.path", "python", {"os"}),
    ("from a import b, c as d", "python", {"b", "d"}),
    ("from a import (b, c)", "python", {"b", "c"}),
    ('import React, { useState as uS } from "react";', "typescript", {"React", "uS"}),
    ("import * as path from 'path';", "javascript", {"path"}),
    ('import "./side-effect.css";', "javascript", set()),
    ("use std::io::{Read, Write as W};", "rust", {"Read", "W"}),
    ("use std::fmt;", "rust", {"fmt"}),
    ("import java.util.List;", "java", {"List"}),
    ("import a.b.*;", "java", set()),
    ('import "net/http"', "go", {"http"}),
    ('import f "fmt"', "go", {"f"}),
    ("#include <vector>", "cpp", {"vector"}),
    ('#include "foo/bar.h"', "c", {"bar"}),
]


@pytest.mark.parametrize("statement, language, names", NAMES, ids=[c[0] for c in NAMES])
def test_the_names_an_import_brings_in(statement, language, names):
    assert imported_names(statement, language) == names


def test_an_import_comes_with_a_completion_only_when_the_completion_uses_it():
    """The CPU preview's slot wrote `from torch import logging` beside completions that use
    neither name: such an import must not ride into the user's file with the completion."""
    text = FILES["python"][0]
    source = Snapshot.parse(text, "python")
    assert companion_edit("from torch import logging", source, "x + 1") is None
    assert companion_edit("from torch import logging", source, "torch.zeros(1)") is None   # binds logging only
    assert companion_edit("from torch import logging", source, "logging.warn(x)") is not None
    assert companion_edit("import numpy as np", source, "numpy.zeros(3)") is None
    assert companion_edit("import numpy as np", source, "np.zeros(3)") is not None
    assert companion_edit("import numpy as np", source, None) is None


def test_the_pipeline_checks_the_import_against_the_text_it_shows():
    """finish() gives the companion edit the completion as shown (finished, unhealed), not the raw slot."""
    text = "import os\n\n\ndef f(x):\n    return \n"
    completion_plan = plan(Snapshot.parse(text, "python"), text.index("return ") + len("return "),
                           Options().merged({"companionEdits": True}))
    assert completion_plan.companion is not None and completion_plan.span.healed == " "

    def shown(companion_text: str, main_text: str):
        return completion_plan.finish(InfillResult([[companion_text, main_text]], steps=1, tokens_committed=1,
                                                   latency_ms=1.0))

    junk = shown("from torch import logging", " x + 1")
    assert junk is not None and junk.text == "x + 1" and junk.companion is None
    needed = shown("import numpy as np", " np.zeros(x)")
    assert needed.text == "np.zeros(x)" and needed.companion.statement == "import numpy as np"


def test_a_crlf_file_gets_a_crlf_import_line():
    text = "import os\r\n\r\ndef f():\r\n    pass\r\n"
    edit = import_edit("import re", Snapshot.parse(text, "python"))
    assert edit is not None and (edit.offset, edit.text) == (len("import os\r\n"), "import re\r\n")
    last_line = "import os"                                 # the import block ends the file, no break after it
    edit = import_edit("import re", Snapshot.parse("# head\r\n" + last_line, "python"))
    assert edit is not None and edit.text == "\r\nimport re\r\n"


def test_a_file_with_lone_carriage_returns_gets_the_import_after_its_imports():
    """The import block's line end was looked for as `\n` only: in a classic-Mac file the import
    went to the end of the file, after the code, on LF lines."""
    text = "import os\rx = 1\r"
    edit = import_edit("import re", Snapshot.parse(text, "python"))
    assert edit is not None and (edit.offset, edit.text) == (len("import os\r"), "import re\r")


def test_a_file_that_starts_with_a_byte_order_mark_gets_the_import_after_it():
    """Inserted at offset 0, the import pushed the BOM into the middle of the file (a SyntaxError)."""
    edit = import_edit("import re", Snapshot.parse("\ufeffx = 1\n", "python"))
    assert edit is not None and edit.offset == 1


def test_a_completion_moved_onto_a_newer_version_places_its_import_afresh():
    """An edit above the imports while the model ran: the completion moves down a line, and the
    import it needs must go after the import block as it is now (the old offset fell mid-line,
    `import import torch\n os`), or nowhere once the file has it."""
    text = '"""Doc."""\nimport os\n\ny = torch.\n'
    old = Snapshot.parse(text, "python")
    companion = import_edit("import torch", old)
    completion = Completion("zeros(3)", len(text) - 1, len(text) - 1, old, span=None, result=None,
                            companion=companion)
    newer = Snapshot.parse("# edited\n" + text, "python")
    moved = completion.moved(completion.start + 9, completion.end + 9, newer)
    assert moved.companion == import_edit("import torch", newer)
    assert moved.companion.offset == companion.offset + 9 == newer.text.index("\n\ny") + 1
    has_it = Snapshot.parse(text.replace("import os\n", "import os\nimport torch\n"), "python")
    assert completion.moved(completion.start + 13, completion.end + 13, has_it).companion is None


@pytest.mark.parametrize("language, text, statement, expected", [
    # the shebang ended the header at once: the import went above it (node --check: SyntaxError)
    ("javascript", "#!/usr/bin/env node\nimport fs from 'fs';\nfs.x();\n", 'import path from "path";',
     "#!/usr/bin/env node\nimport fs from 'fs';\nimport path from \"path\";\nfs.x();\n"),
    ("javascript", "#!/usr/bin/env node\nconsole.log(1);\n", 'import path from "path";',
     "#!/usr/bin/env node\nimport path from \"path\";\nconsole.log(1);\n"),
    ("typescript", "#!/usr/bin/env node\nimport fs from 'fs';\n", 'import path from "path";',
     "#!/usr/bin/env node\nimport fs from 'fs';\nimport path from \"path\";\n"),
    ("rust", "#!/usr/bin/env rust\nuse std::io;\nfn main() {}\n", "use std::fmt;",
     "#!/usr/bin/env rust\nuse std::io;\nuse std::fmt;\nfn main() {}\n"),
    # a header's include guard and `#pragma once` stay first
    ("c", "/* a.h */\n#ifndef A_H\n#define A_H\n#include <stdio.h>\nint x;\n#endif\n", "#include <stdlib.h>",
     "/* a.h */\n#ifndef A_H\n#define A_H\n#include <stdio.h>\n#include <stdlib.h>\nint x;\n#endif\n"),
    ("c", "#ifndef A_H\n#define A_H\nint x;\n#endif\n", "#include <stdlib.h>",
     "#ifndef A_H\n#define A_H\n#include <stdlib.h>\nint x;\n#endif\n"),
    ("cpp", "#pragma once\nint x;\n", "#include <map>", "#pragma once\n#include <map>\nint x;\n"),
])
def test_an_import_goes_below_a_shebang_and_inside_an_include_guard(language, text, statement, expected):
    source = Snapshot.parse(text, language)
    edit = import_edit(statement, source)
    assert text[:edit.offset] + edit.text + text[edit.offset:] == expected
    assert Snapshot.parse(expected, language).error_count() == 0


def test_an_include_inside_the_guard_is_one_the_file_has():
    text = "#ifndef A_H\n#define A_H\n#include <stdio.h>\nint x;\n#endif\n"
    assert import_edit("#include <stdio.h>", Snapshot.parse(text, "c")) is None
