"""Renames that follow a binding, not only its calls; class bodies that are finished, not holes.

- dllm/nextEdits after `def area` -> `def surface` renamed the calls only: `map(area, xs)`,
  `key=area`, `[area]`, `@area` and `from shapes import area` (shapes.py importing itself) kept
  the old name. Every reference of the binding follows now, by scope: a parameter, a local, a
  comprehension variable or another module's import of the name elsewhere is another thing,
  and so is an attribute `obj.area`.
- `class NotFound(Exception): pass`, `class Color(Enum): ...`, an empty `@dataclass` were holes
  (a fill wrote a model's guess into a finished class), and so was a base class's
  `raise NotImplementedError` that a subclass overrides (its abstract method or hook).
"""
from __future__ import annotations

import pytest
from lsprotocol import types
from server.lsp_harness import open_doc, start_server, stop_server, wait_loaded

from dllm_lsp.bench.typing import plain
from dllm_lsp.multisite.holes import find_holes
from dllm_lsp.multisite.next_edits import module_name, plan_next_edits
from dllm_lsp.syntax.snapshot import Snapshot

from .edits import apply_text_edits

pytestmark = pytest.mark.timeout(120)


def renamed(before: str, old: str, new: str, language: str = "python", module: str | None = None) -> str:
    """The text after the user's change `old` -> `new` (its first occurrence) with every rename
    edit nextEdits plans applied."""
    after = before.replace(old, new, 1)
    plan = plan_next_edits([before], after, language, module_name=module)
    assert plan is not None and plan.change.kind == "rename"
    for edit in sorted(plan.renames, key=lambda o: -o.start):
        after = after[:edit.start] + edit.new_text + after[edit.end:]
    return after


SHAPES = (
    "import functools\n"
    "from shapes import area as area_again\n"
    "from other import area\n"
    "\n"
    "\n"
    "def area(w, h):\n"
    "    return w * h\n"
    "\n"
    "\n"
    "@area\n"
    "def square(shape, xs):\n"
    "    callbacks = [area]\n"
    "    shape.area = sorted(xs, key=area)\n"
    "    return list(map(area, xs)), area(1, 2), functools.partial(area, 2), callbacks\n"
    "\n"
    "\n"
    "def parameter(area=area):\n"
    "    return area\n"
    "\n"
    "\n"
    "def local():\n"
    "    area = 3\n"
    "    return area, [area for area in range(area)]\n"
    "\n"
    "\n"
    "def imported_here():\n"
    "    from other import area\n"
    "    return area(1)\n"
    "\n"
    "\n"
    "def imported_from_itself():\n"
    "    from shapes import area\n"
    "    return area(1)\n"
    "\n"
    "\n"
    "def rebinds():\n"
    "    global area\n"
    "    area = functools.cache(area)\n"
    "\n"
    "\n"
    "class Shape:\n"
    "    def area(self):\n"
    "        return area(1, 1)\n"
)
SHAPES_RENAMED = (
    "import functools\n"
    "from shapes import surface as area_again\n"      # this file's own function
    "from other import area\n"                        # another module's name
    "\n"
    "\n"
    "def surface(w, h):\n"
    "    return w * h\n"
    "\n"
    "\n"
    "@surface\n"
    "def square(shape, xs):\n"
    "    callbacks = [surface]\n"
    "    shape.area = sorted(xs, key=surface)\n"      # an attribute is another binding
    "    return list(map(surface, xs)), surface(1, 2), functools.partial(surface, 2), callbacks\n"
    "\n"
    "\n"
    "def parameter(area=surface):\n"                  # the default is read outside, the parameter is its own
    "    return area\n"
    "\n"
    "\n"
    "def local():\n"
    "    area = 3\n"
    "    return area, [area for area in range(area)]\n"
    "\n"
    "\n"
    "def imported_here():\n"
    "    from other import area\n"
    "    return area(1)\n"
    "\n"
    "\n"
    "def imported_from_itself():\n"
    "    from shapes import surface\n"
    "    return surface(1)\n"
    "\n"
    "\n"
    "def rebinds():\n"
    "    global surface\n"
    "    surface = functools.cache(surface)\n"
    "\n"
    "\n"
    "class Shape:\n"
    "    def area(self):\n"                            # a method: the class's API
    "        return surface(1, 1)\n"
)


def test_a_function_rename_reaches_every_reference_of_its_binding():
    assert renamed(SHAPES, "def area(w", "def surface(w", module="shapes") == SHAPES_RENAMED


def test_an_import_of_the_name_from_another_file_is_another_thing():
    # shapes.py's `from shapes import area` is the function itself; in geometry.py it is not
    result = renamed(SHAPES, "def area(w", "def surface(w", module="geometry")
    assert "from shapes import area as area_again\n" in result
    assert "def imported_from_itself():\n    from shapes import area\n    return area(1)\n" in result
    assert "@surface\n" in result and "key=surface" in result


METHODS = (
    "class Shape:\n"
    "    @property\n"
    "    def area(self):\n"
    "        return 1\n"
    "\n"
    "    @area.setter\n"
    "    def area(self, value):\n"
    "        self._area = value\n"
    "\n"
    "    alias = area\n"
    "    later = staticmethod(lambda: area())\n"
    "\n"
    "    def run(self, xs):\n"
    "        return sorted(xs, key=self.area), self.area(), area(), other.area\n"
    "\n"
    "\n"
    "def area():\n"
    "    return 0\n"
)


def test_a_method_rename_reaches_its_class_body_and_its_receiver_values():
    assert renamed(METHODS, "def area(self):", "def surface(self):") == (
        "class Shape:\n"
        "    @property\n"
        "    def surface(self):\n"
        "        return 1\n"
        "\n"
        "    @surface.setter\n"
        "    def surface(self, value):\n"                            # the same property
        "        self._area = value\n"
        "\n"
        "    alias = surface\n"
        "    later = staticmethod(lambda: area())\n"                 # a lambda does not see the class's names
        "\n"
        "    def run(self, xs):\n"
        "        return sorted(xs, key=self.surface), self.surface(), area(), other.area\n"
        "\n"
        "\n"
        "def area():\n"
        "    return 0\n"
    )


@pytest.mark.parametrize("language, before, old, new, expected", [
    ("typescript",
     "function area(w: number) { return w; }\nexport { area };\n"
     "function use(xs: number[]) { return xs.map(area).concat([area]); }\n"
     "function local() { const area = 1; return area; }\nfunction param(area: number) { return area; }\n"
     "const o = { area, b: area };\n",
     "function area(w", "function surface(w",
     "function surface(w: number) { return w; }\nexport { surface };\n"
     "function use(xs: number[]) { return xs.map(surface).concat([surface]); }\n"
     "function local() { const area = 1; return area; }\nfunction param(area: number) { return area; }\n"
     "const o = { area: surface, b: surface };\n"),
    ("rust",
     "fn area(w: u32) -> u32 { w }\nfn f(xs: Vec<u32>) -> Vec<u32> { xs.into_iter().map(area).collect() }\n"
     "fn g() -> u32 { let area = 1; area }\n",
     "fn area(w", "fn surface(w",
     "fn surface(w: u32) -> u32 { w }\nfn f(xs: Vec<u32>) -> Vec<u32> { xs.into_iter().map(surface).collect() }\n"
     "fn g() -> u32 { let area = 1; area }\n"),
    ("go",
     "package main\n\nfunc area(w int) int { return w }\n\nfunc f(xs []int) { apply(xs, area); g := area; _ = g }\n"
     "func h() int { area := 1; return area }\n",
     "func area(w", "func surface(w",
     "package main\n\nfunc surface(w int) int { return w }\n\n"
     "func f(xs []int) { apply(xs, surface); g := surface; _ = g }\n"
     "func h() int { area := 1; return area }\n"),
])
def test_a_function_rename_reaches_its_values_in_other_languages(language, before, old, new, expected):
    assert renamed(before, old, new, language) == expected


def test_a_variable_rename_leaves_locals_of_that_name_in_other_scopes():
    before = (
        "name = 'app'\n\n\ndef f():\n    name = 'local'\n    return name\n\n\ndef g():\n    return name\n\n\n"
        "class User:\n    name = 'user'\n    title = name\n\n\n"
        "def outer(width):\n    def inner():\n        width = 3\n        return width\n    return inner() + width\n"
    )
    result = renamed(before, "name = 'app'", "label = 'app'")
    assert result == before.replace("name = 'app'", "label = 'app'").replace("    return name\n\n\nclass",
                                                                             "    return label\n\n\nclass")
    assert renamed(before, "outer(width", "outer(size").endswith(
        "def outer(size):\n    def inner():\n        width = 3\n        return width\n    return inner() + size\n")


@pytest.mark.parametrize("uri, name", [
    ("file:///w/shapes.py", "shapes"), ("file:///w/pkg/__init__.py", "pkg"), ("file:///w/My%20Lib/geo.py", "geo"),
    ("file:///w/stubs/geo.pyi", "geo"), ("file:///w/geo.ts", None), ("untitled:Untitled-1", None),
])
def test_module_names_come_from_the_uri(uri, name):
    assert module_name(uri) == name


CLASSES = (
    "from dataclasses import dataclass\n"
    "from enum import Enum\n"
    "\n"
    "\n"
    "class NotFound(Exception): pass\n"
    "\n"
    "\n"
    "class Error(Exception):\n"
    "    ...\n"
    "\n"
    "\n"
    "class Documented(Error):\n"
    "    \"\"\"Raised when ... is missing.\"\"\"\n"
    "    pass\n"
    "\n"
    "\n"
    "class Color(Enum):\n"
    "    pass\n"
    "\n"
    "\n"
    "@dataclass\n"
    "class Config:\n"
    "    pass\n"
    "\n"
    "\n"
    "class Later(Exception):\n"
    "    # TODO: say what is missing\n"
    "    pass\n"
    "\n"
    "\n"
    "class Empty:\n"
    "    pass\n"
    "\n"
    "\n"
    "class Base:\n"
    "    def on_event(self, event):\n"
    "        pass\n"
    "\n"
    "    def area(self):\n"
    "        \"\"\"The area.\"\"\"\n"
    "        raise NotImplementedError\n"
    "\n"
    "    def perimeter(self):\n"
    "        raise NotImplementedError\n"
    "\n"
    "\n"
    "class Square(Base):\n"
    "    def on_event(self, event):\n"
    "        print(event)\n"
    "\n"
    "    @property\n"
    "    def area(self):\n"
    "        return 1\n"
)
CLASS_HOLES = ["# TODO: say what is missing", "pass", "raise NotImplementedError"]


def hole_texts(text: str, language: str = "python", start: int = 0, end: int | None = None) -> list[str]:
    scope = find_holes(Snapshot.parse(text, language), start, len(text) if end is None else end)
    return [text[h.start:h.end] for h in scope.holes]


def test_finished_classes_and_overridden_base_methods_are_no_holes():
    holes = hole_texts(CLASSES)
    assert holes == CLASS_HOLES
    # the `pass` left is Empty's (no base, no decorator), the raise is perimeter's (not overridden)
    at_empty = CLASSES.index("class Empty")
    at_perimeter = CLASSES.index("def perimeter")
    assert hole_texts(CLASSES, start=at_empty, end=at_perimeter + 60) == ["pass", "raise NotImplementedError"]


def test_an_overridden_typescript_method_is_no_hole():
    text = (
        "class Shape {\n"
        "  area(): number { throw new Error(\"not implemented\"); }\n"
        "  name(): string { throw new Error(\"not implemented\"); }\n"
        "}\n"
        "class Square extends Shape {\n"
        "  area(): number { return 1; }\n"
        "}\n"
    )
    assert hole_texts(text, "typescript") == ['throw new Error("not implemented");']
    start = text.index("name()")
    assert hole_texts(text, "typescript", start, start + 60) == ['throw new Error("not implemented");']


def position(text: str, at: int) -> types.Position:
    return types.Position(line=text.count("\n", 0, at), character=at - (text.rfind("\n", 0, at) + 1))


async def test_through_the_server(tmp_path, tiny_model_dir):
    client, _, _ = await start_server(tmp_path, {"model": str(tiny_model_dir), "device": "cpu"})
    try:
        assert (await wait_loaded(client))["loaded"]
        # the rename: the server learns the module name from the URI
        uri = "file:///tmp/s34/shapes.py"
        open_doc(client, uri, SHAPES)
        after = SHAPES.replace("def area(w", "def surface(w", 1)
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=after)]))
        at = after.index("def surface") + 4
        result = plain(await client.protocol.send_request_async("dllm/nextEdits", {
            "textDocument": {"uri": uri}, "position": {"line": position(after, at).line, "character": 6}}))
        assert (result["change"]["kind"], result["change"]["oldName"], result["change"]["newName"]) == \
            ("rename", "area", "surface")
        assert all(e["source"] == "rename" and e["newText"] == "surface" for e in result["edits"])
        assert apply_text_edits(after, result["edits"]) == SHAPES_RENAMED

        # the holes: the code action in a finished class offers nothing; the file's holes are the real ones
        classes = "file:///tmp/s34/classes.py"
        open_doc(client, classes, CLASSES)
        for inside, titles in [("class NotFound", []), ("class Error", []), ("class Color", []), ("class Config", []),
                               ("class Later", ["Fill 1 hole with dllm"]), ("class Empty", ["Fill 1 hole with dllm"]),
                               ("from enum", ["Fill 3 holes in this file with dllm"])]:
            at = CLASSES.index(inside) + 2
            actions = await client.text_document_code_action_async(types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=classes),
                range=types.Range(start=position(CLASSES, at), end=position(CLASSES, at)),
                context=types.CodeActionContext(diagnostics=[])))
            assert [a.title for a in actions or []] == titles, inside
        whole = {"start": {"line": 0, "character": 0}, "end": {"line": CLASSES.count("\n"), "character": 0}}
        fill = plain(await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="dllm.fillHoles", arguments=[classes, whole, {"apply": False}])))
        assert [s["label"] for s in fill["sites"]] == [f"hole {h!r}" for h in CLASS_HOLES]
        # the raise filled is perimeter's: area's is the abstract method Square overrides
        assert fill["sites"][-1]["range"]["start"]["line"] == CLASSES.count("\n", 0, CLASSES.index("def perimeter")) + 1
    finally:
        await stop_server(client)
