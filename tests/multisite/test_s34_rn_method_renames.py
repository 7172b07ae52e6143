"""Next edits after a method's rename in Go, JS/TS and Rust, and block scopes.

- A Go method's name (`func (s Shape) Area()`) and a JS/TS class method's (`area() {...}`) are
  spelled as members (field_identifier, property_identifier): dllm/nextEdits found no rename at
  all. Now their calls and values through the receiver follow (`s.Area()`, `f := s.Area`,
  `this.area()`), and never another receiver's member of that name (`r.Area()` of another type,
  `this.area` in a `function` or a nested class, a static `area` beside an instance one).
- A Rust inherent method's rename stayed in its own `impl` block: `self.area()` in another
  `impl Shape` (or `impl Describe for Shape`) and `Shape::area(s)` kept the old name.
- A JS `let`/`const`, a Rust `let` or a Go `:=` in an inner block hid the name in the whole
  function: `area(1)` before the block and after it kept the old name.
"""
from __future__ import annotations

import pytest
from lsprotocol import types
from server.lsp_harness import open_doc, start_server, stop_server, wait_loaded

from dllm_lsp.bench.typing import plain
from dllm_lsp.multisite.next_edits import plan_next_edits
from dllm_lsp.syntax.snapshot import Snapshot

from .edits import apply_text_edits

pytestmark = pytest.mark.timeout(120)


def renamed(before: str, old: str, new: str, language: str) -> str | None:
    """The text after the user's change `old` -> `new` (its first occurrence) with every rename
    edit nextEdits plans applied; None when it offers no rename."""
    after = before.replace(old, new, 1)
    plan = plan_next_edits([before], after, language)
    if plan is None or plan.change.kind != "rename":
        return None
    for edit in sorted(plan.renames, key=lambda o: -o.start):
        after = after[:edit.start] + edit.new_text + after[edit.end:]
    return after


GO = (
    "package main\n"
    "\n"
    "type Shape struct{ w int }\n"
    "\n"
    "type Rect struct{ w int }\n"
    "\n"
    "func Area(s Shape) int { return s.w }\n"
    "\n"
    "func (s Shape) Area() int { return s.w * s.w }\n"
    "\n"
    "func (sh *Shape) Twice() int {\n"
    "\tf := sh.Area\n"
    "\treturn sh.Area() + f() + Area(*sh)\n"
    "}\n"
    "\n"
    "func (sh *Shape) Mixed(rects []Rect, r Rect) int {\n"
    "\ttotal := sh.Area()\n"
    "\tfor _, sh := range rects {\n"
    "\t\ttotal += sh.Area()\n"
    "\t}\n"
    "\tg := func(sh Rect) int { return sh.Area() }\n"
    "\treturn total + r.Area() + g(r) + sh.Area()\n"
    "}\n"
    "\n"
    "func (r Rect) Area() int { return r.w }\n"
    "\n"
    "func (r Rect) Double() int { return 2 * r.Area() }\n"
    "\n"
    "var byValue = Shape.Area\n"
    "var byPointer = (*Shape).Area\n"
    "var other = Rect.Area\n"
)
GO_RENAMED = (
    "package main\n"
    "\n"
    "type Shape struct{ w int }\n"
    "\n"
    "type Rect struct{ w int }\n"
    "\n"
    "func Area(s Shape) int { return s.w }\n"                   # a function of the same name
    "\n"
    "func (s Shape) Surface() int { return s.w * s.w }\n"
    "\n"
    "func (sh *Shape) Twice() int {\n"
    "\tf := sh.Surface\n"                                       # a method value
    "\treturn sh.Surface() + f() + Area(*sh)\n"
    "}\n"
    "\n"
    "func (sh *Shape) Mixed(rects []Rect, r Rect) int {\n"
    "\ttotal := sh.Surface()\n"
    "\tfor _, sh := range rects {\n"                            # the loop's `sh` is a Rect
    "\t\ttotal += sh.Area()\n"
    "\t}\n"
    "\tg := func(sh Rect) int { return sh.Area() }\n"          # and so is the closure's
    "\treturn total + r.Area() + g(r) + sh.Surface()\n"
    "}\n"
    "\n"
    "func (r Rect) Area() int { return r.w }\n"                # another type's method
    "\n"
    "func (r Rect) Double() int { return 2 * r.Area() }\n"
    "\n"
    "var byValue = Shape.Surface\n"                            # method expressions
    "var byPointer = (*Shape).Surface\n"
    "var other = Rect.Area\n"
)


def test_a_go_method_rename_follows_its_receivers_and_method_expressions():
    assert renamed(GO, "func (s Shape) Area()", "func (s Shape) Surface()", "go") == GO_RENAMED
    assert Snapshot.parse(GO_RENAMED, "go").error_count() == 0


@pytest.mark.parametrize("onto", ["Twice", "w"])
def test_a_go_method_renamed_onto_another_member_of_its_type_is_no_rename(onto):
    # `Twice` is another method of Shape, `w` its field: the method now names that member
    assert renamed(GO, "func (s Shape) Area()", f"func (s Shape) {onto}()", "go") is None


TS = (
    "class Base {\n"
    "  area(): number { return 1; }\n"
    "}\n"
    "class Shape extends Base {\n"
    "  static area(): number { return 0; }\n"
    "  area(): number;\n"
    "  area(scale?: number): number { return (scale ?? 1) * Shape.area(); }\n"
    "  twice(): number { return this.area() + this.area(2) + super.area(); }\n"
    "  first = this.area();\n"
    "  values(xs: number[]): number[] {\n"
    "    const f = this.area;\n"
    "    return xs.map(() => this.area()).concat(xs.map(function (this: Base) { return this.area(); }));\n"
    "  }\n"
    "  static make(): number { return this.area(); }\n"
    "  nested() {\n"
    "    return class { area() { return 1; } run() { return this.area(); } };\n"
    "  }\n"
    "  other(o: { area(): number }): number { return o.area() + { area() { return 2; } }.area(); }\n"
    "}\n"
    "class Square extends Shape {\n"
    "  run(): number { return super.area() + this.area(); }\n"
    "}\n"
    "class Circle extends Shape {\n"
    "  area(): number { return 3; }\n"
    "  run(): number { return super.area() + this.area(); }\n"
    "}\n"
)
TS_RENAMED = (
    "class Base {\n"
    "  area(): number { return 1; }\n"
    "}\n"
    "class Shape extends Base {\n"
    "  static area(): number { return 0; }\n"                    # the static one is another method
    "  surface(): number;\n"                                      # its overload signature
    "  surface(scale?: number): number { return (scale ?? 1) * Shape.area(); }\n"
    "  twice(): number { return this.surface() + this.surface(2) + super.area(); }\n"   # super: Base's
    "  first = this.surface();\n"
    "  values(xs: number[]): number[] {\n"
    "    const f = this.surface;\n"
    "    return xs.map(() => this.surface()).concat(xs.map(function (this: Base) { return this.area(); }));\n"
    "  }\n"
    "  static make(): number { return this.area(); }\n"          # `this` is the class: the static one
    "  nested() {\n"
    "    return class { area() { return 1; } run() { return this.area(); } };\n"
    "  }\n"
    "  other(o: { area(): number }): number { return o.area() + { area() { return 2; } }.area(); }\n"
    "}\n"
    "class Square extends Shape {\n"
    "  run(): number { return super.surface() + this.surface(); }\n"
    "}\n"
    "class Circle extends Shape {\n"
    "  area(): number { return 3; }\n"                           # its own area: `this.area` is that
    "  run(): number { return super.surface() + this.area(); }\n"
    "}\n"
)


def test_a_typescript_method_rename_follows_this_and_super_of_its_class_only():
    assert renamed(TS, "area(scale?: number)", "surface(scale?: number)", "typescript") == TS_RENAMED
    assert Snapshot.parse(TS_RENAMED, "typescript").error_count() == 0


def test_a_javascript_accessor_pair_is_renamed_together():
    before = (
        "class Box {\n"
        "  get size() { return this._size; }\n"
        "  set size(v) { this._size = v; }\n"
        "  grow() { this.size = this.size + 1; return other.size; }\n"
        "}\n"
    )
    assert renamed(before, "get size()", "get extent()", "javascript") == (
        "class Box {\n"
        "  get extent() { return this._size; }\n"
        "  set extent(v) { this._size = v; }\n"
        "  grow() { this.extent = this.extent + 1; return other.size; }\n"
        "}\n"
    )
    # onto a member the class has, or from a use rather than the definition: no rename
    assert renamed(before, "get size()", "get grow()", "javascript") is None
    assert renamed(before, "this.size + 1", "this.extent + 1", "javascript") is None


def test_a_method_rename_leaves_a_nested_class_receiver_alone():
    """`self` in a class nested in the method's class is the nested class's object (it was renamed)."""
    before = (
        "class Shape:\n"
        "    def area(self):\n"
        "        return 1\n"
        "\n"
        "    def run(self):\n"
        "        return self.area()\n"
        "\n"
        "    class Part:\n"
        "        def area(self):\n"
        "            return 2\n"
        "\n"
        "        def run(self):\n"
        "            return self.area()\n"
    )
    after = renamed(before, "def area(self):\n        return 1", "def surface(self):\n        return 1", "python")
    assert after == before.replace("def area(self):\n        return 1", "def surface(self):\n        return 1", 1) \
        .replace("return self.area()", "return self.surface()", 1)


RUST = (
    "struct Shape { area: u32 }\n"
    "struct Rect { w: u32 }\n"
    "\n"
    "fn area(s: &Shape) -> u32 { s.area }\n"
    "\n"
    "impl Shape {\n"
    "    fn area(&self) -> u32 { self.area * 2 }\n"
    "}\n"
    "\n"
    "impl Shape {\n"
    "    fn twice(&self) -> u32 { self.area() + Self::area(self) + area(self) + self.area }\n"
    "}\n"
    "\n"
    "impl Describe for Shape {\n"
    "    fn describe(&self) -> String { self.area().to_string() }\n"
    "}\n"
    "\n"
    "impl Rect {\n"
    "    fn area(&self) -> u32 { self.w }\n"
    "    fn twice(&self) -> u32 { self.area() * Self::area(self) }\n"
    "}\n"
    "\n"
    "fn total(s: &Shape, r: &Rect) -> u32 { Shape::area(s) + Rect::area(r) + r.area() }\n"
)
RUST_RENAMED = (
    "struct Shape { area: u32 }\n"
    "struct Rect { w: u32 }\n"
    "\n"
    "fn area(s: &Shape) -> u32 { s.area }\n"                     # a function and a field of that name
    "\n"
    "impl Shape {\n"
    "    fn surface(&self) -> u32 { self.area * 2 }\n"
    "}\n"
    "\n"
    "impl Shape {\n"
    "    fn twice(&self) -> u32 { self.surface() + Self::surface(self) + area(self) + self.area }\n"
    "}\n"
    "\n"
    "impl Describe for Shape {\n"
    "    fn describe(&self) -> String { self.surface().to_string() }\n"
    "}\n"
    "\n"
    "impl Rect {\n"                                               # another type's method
    "    fn area(&self) -> u32 { self.w }\n"
    "    fn twice(&self) -> u32 { self.area() * Self::area(self) }\n"
    "}\n"
    "\n"
    "fn total(s: &Shape, r: &Rect) -> u32 { Shape::surface(s) + Rect::area(r) + r.area() }\n"
)


def test_a_rust_method_rename_follows_every_impl_of_its_type():
    assert renamed(RUST, "fn area(&self)", "fn surface(&self)", "rust") == RUST_RENAMED
    assert Snapshot.parse(RUST_RENAMED, "rust").error_count() == 0
    # `twice` is in Shape's other impl block: renaming onto it is no rename
    assert renamed(RUST, "fn area(&self)", "fn twice(&self)", "rust") is None


@pytest.mark.parametrize("language, before, old, new, expected", [
    ("javascript",
     "function area(w) { return w; }\n"
     "function f(xs, flag) {\n"
     "  const a = area(1);\n"
     "  if (flag) {\n"
     "    let area = 2;\n"
     "    return area + a;\n"
     "  }\n"
     "  for (const area of xs) { use(area); }\n"
     "  try { use(a); } catch (area) { use(area); }\n"
     "  return xs.map(area);\n"
     "}\n"
     "function g() { var area = 1; { return area; } }\n",
     "function area(w", "function surface(w",
     "function surface(w) { return w; }\n"
     "function f(xs, flag) {\n"
     "  const a = surface(1);\n"
     "  if (flag) {\n"
     "    let area = 2;\n"
     "    return area + a;\n"
     "  }\n"
     "  for (const area of xs) { use(area); }\n"
     "  try { use(a); } catch (area) { use(area); }\n"
     "  return xs.map(surface);\n"
     "}\n"
     "function g() { var area = 1; { return area; } }\n"),       # `var`: the whole function's
    ("rust",
     "fn area(w: u32) -> u32 { w }\n"
     "fn f(flag: bool) -> u32 {\n"
     "    let a = area(1);\n"
     "    if flag {\n"
     "        let area = 2;\n"
     "        return area + a;\n"
     "    }\n"
     "    let b = area(2);\n"
     "    let area = area(3) + b;\n"
     "    area\n"
     "}\n"
     "fn g(x: Option<u32>) -> u32 {\n"
     "    if let Some(area) = x { return area; }\n"
     "    for area in [1u32] { let _ = area; }\n"
     "    area(4)\n"
     "}\n",
     "fn area(w", "fn surface(w",
     "fn surface(w: u32) -> u32 { w }\n"
     "fn f(flag: bool) -> u32 {\n"
     "    let a = surface(1);\n"
     "    if flag {\n"
     "        let area = 2;\n"
     "        return area + a;\n"
     "    }\n"
     "    let b = surface(2);\n"
     "    let area = surface(3) + b;\n"                           # the value is read before the `let`
     "    area\n"
     "}\n"
     "fn g(x: Option<u32>) -> u32 {\n"
     "    if let Some(area) = x { return area; }\n"
     "    for area in [1u32] { let _ = area; }\n"
     "    surface(4)\n"
     "}\n"),
    ("go",
     "package main\n\n"
     "func area(w int) int { return w }\n\n"
     "func f(flag bool) int {\n"
     "\ta := area(1)\n"
     "\tif flag {\n"
     "\t\tarea := 2\n"
     "\t\treturn area + a\n"
     "\t}\n"
     "\tif area := area(2); area > 0 {\n"
     "\t\treturn area\n"
     "\t}\n"
     "\treturn area(3)\n"
     "}\n",
     "func area(w", "func surface(w",
     "package main\n\n"
     "func surface(w int) int { return w }\n\n"
     "func f(flag bool) int {\n"
     "\ta := surface(1)\n"
     "\tif flag {\n"
     "\t\tarea := 2\n"
     "\t\treturn area + a\n"
     "\t}\n"
     "\tif area := surface(2); area > 0 {\n"
     "\t\treturn area\n"
     "\t}\n"
     "\treturn surface(3)\n"
     "}\n"),
    # a variable declared in an inner block: its rename stays in that block
    ("rust",
     "fn f() -> u32 {\n    let width = 1;\n    {\n        let width = 2;\n        show(width);\n    }\n    width\n}\n",
     "let width = 2", "let size = 2",
     "fn f() -> u32 {\n    let width = 1;\n    {\n        let size = 2;\n        show(size);\n    }\n    width\n}\n"),
    ("typescript",
     "function f(): number {\n  const width = 1;\n  {\n    const width = 2;\n    show(width);\n  }\n  return width;\n}\n",
     "const width = 2", "const size = 2",
     "function f(): number {\n  const width = 1;\n  {\n    const size = 2;\n    show(size);\n  }\n  return width;\n}\n"),
    # the outer one's rename leaves the inner block's own `width`
    ("typescript",
     "function f(): number {\n  const width = 1;\n  {\n    const width = 2;\n    show(width);\n  }\n  return width;\n}\n",
     "const width = 1", "const size = 1",
     "function f(): number {\n  const size = 1;\n  {\n    const width = 2;\n    show(width);\n  }\n  return size;\n}\n"),
])
def test_a_block_declaration_shadows_only_within_its_block(language, before, old, new, expected):
    assert renamed(before, old, new, language) == expected
    assert Snapshot.parse(expected, language).error_count() == 0


def position(text: str, at: int) -> dict:
    return {"line": text.count("\n", 0, at), "character": at - (text.rfind("\n", 0, at) + 1)}


async def test_through_the_server(tmp_path, tiny_model_dir):
    client, _, _ = await start_server(tmp_path, {"model": str(tiny_model_dir), "device": "cpu"})
    try:
        assert (await wait_loaded(client))["loaded"]
        for language, extension, before, old, new, names, expected in [
            ("go", "go", GO, "func (s Shape) Area()", "func (s Shape) Surface()", ("Area", "Surface"), GO_RENAMED),
            ("typescript", "ts", TS, "area(scale?: number)", "surface(scale?: number)", ("area", "surface"),
             TS_RENAMED),
            ("rust", "rs", RUST, "fn area(&self)", "fn surface(&self)", ("area", "surface"), RUST_RENAMED),
        ]:
            uri = f"file:///tmp/s34rn/shapes.{extension}"
            open_doc(client, uri, before, language)
            after = before.replace(old, new, 1)
            client.text_document_did_change(types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=after)]))
            result = plain(await client.protocol.send_request_async("dllm/nextEdits", {
                "textDocument": {"uri": uri}, "position": position(after, after.index(new))}))
            change = result["change"]
            assert (change["kind"], change["oldName"], change["newName"]) == ("rename", *names), language
            assert result["edits"] and all(e["source"] == "rename" for e in result["edits"])
            assert apply_text_edits(after, result["edits"]) == expected, language
    finally:
        await stop_server(client)
