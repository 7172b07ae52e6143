"""Table-driven span-planner cases: for each language, a source with the cursor at `‸` and the
exact span chosen (kind, the typed word it replaces, one line or several, slot length, indent).

Every case also checks the request around the span: with these small files the whole text fits
the budget, so the prefix is exactly the text before the replaced range and the suffix exactly
the text after the cursor.
"""
import pytest

from dllm_lsp.syntax.document import ParsedDocument
from dllm_lsp.syntax.snapshot import Snapshot
from dllm_lsp.planner.spans import PlannerSettings, plan_span

CURSOR = "‸"
LINE, MULTI = 32, 64   # PlannerSettings defaults: max_line_tokens, max_span_tokens

# (languageId, source, kind, typed_prefix, single_line, max_tokens, indent, closer_indent)
CASES = [
    # --- Python
    ("python", "x = 1 +‸\n", "line_tail", "", True, LINE, "", None),
    ("python", "print(a, ‸)\n", "line_tail", "", True, LINE, "", None),
    ("python", "    retu‸\n", "identifier", "retu", True, LINE, "    ", None),
    ("python", "x = os.pa‸\n", "identifier", "pa", True, LINE, "", None),
    ("python", "é = 1\ny = é‸\n", "identifier", "é", True, LINE, "", None),
    ("python", "x = 0x1f‸\n", "line_tail", "", True, LINE, "", None),
    ("python", "foo(‸)\n", "arguments", "", True, LINE, "", None),
    ("python", "d = {‸}\n", "arguments", "", True, LINE, "", None),
    ("python", 'x = "‸"\n', "string", "", True, LINE, "", None),
    ("python", 'print(f"‸")\n', "string", "", True, LINE, "", None),
    ("python", "def f():‸\n", "block_body", "", False, MULTI, "    ", None),
    ("python", "def f():\n    ‸\n\nx = 1\n", "block_body", "", False, MULTI, "    ", None),
    ("python", "def f():\n‸\n", "block_body", "", False, MULTI, "    ", None),
    ("python", "if x:\n    pass\nelse:‸\n", "block_body", "", False, MULTI, "    ", None),
    ("python", "class A:\n  def f(self):\n  ‸\n", "block_body", "", False, MULTI, "    ", None),
    ("python", "class A:\n    def f(self):‸\n        pass\n", "line_tail", "", True, LINE, "    ", None),
    ("python", "def f():\n    x = 1\n    ‸\n", "line", "", False, MULTI, "    ", None),
    ("python", "x = lambda:‸\n", "line_tail", "", True, LINE, "", None),
    ("python", 'x = {"a":‸\n', "line_tail", "", True, LINE, "", None),
    ("python", "# if x:‸\n", "line_tail", "", True, LINE, "", None),
    ("python", "items = [\n‸\n]\n", "block_body", "", False, MULTI, "    ", None),
    # --- JavaScript
    ("javascript", "const x = 1 +‸\n", "line_tail", "", True, LINE, "", None),
    ("javascript", "foo(a, ‸);\n", "line_tail", "", True, LINE, "", None),
    ("javascript", "retu‸\n", "identifier", "retu", True, LINE, "", None),
    ("javascript", "const el = $ro‸\n", "identifier", "$ro", True, LINE, "", None),
    ("javascript", "foo(‸);\n", "arguments", "", True, LINE, "", None),
    ("javascript", "const o = {‸};\n", "arguments", "", True, LINE, "", None),
    ("javascript", 'const s = "‸";\n', "string", "", True, LINE, "", None),
    ("javascript", "const t = `‸`;\n", "string", "", True, LINE, "", None),
    ("javascript", "function f() {‸\n}\n", "block_body", "", False, MULTI, "  ", None),
    ("javascript", "function f() {\n  ‸\n}\n", "block_body", "", False, MULTI, "  ", None),
    ("javascript", "function f() {‸}\n", "block_body", "", False, MULTI, "  ", ""),
    ("javascript", "if (x) {‸\n  y();\n}\n", "line_tail", "", True, LINE, "", None),
    ("javascript", "function f() {\n  a();\n  ‸\n}\n", "line", "", False, MULTI, "  ", None),
    ("javascript", "switch (x) {\n  case 1:‸\n}\n", "block_body", "", False, MULTI, "    ", None),
    ("javascript", "// see {‸\n", "line_tail", "", True, LINE, "", None),
    # --- TypeScript
    ("typescript", "let x: number = 1 +‸\n", "line_tail", "", True, LINE, "", None),
    ("typescript", "interface A {‸}\n", "block_body", "", False, MULTI, "  ", ""),
    ("typescript", "function f(a: string): void {\n  ‸\n}\n", "block_body", "", False, MULTI, "  ", None),
    ("typescript", "const o: T = {‸};\n", "arguments", "", True, LINE, "", None),
    ("typescript", "f<T>(‸);\n", "arguments", "", True, LINE, "", None),
    ("typescript", "let s = '‸';\n", "string", "", True, LINE, "", None),
    ("typescript", "const n = this.cou‸\n", "identifier", "cou", True, LINE, "", None),
    # --- TSX
    ("typescriptreact", "const a = <div>{‸}</div>;\n", "arguments", "", True, LINE, "", None),
    ("typescriptreact", 'function C() {\n  return <div className="‸" />;\n}\n', "string", "", True, LINE, "  ", None),
    ("typescriptreact", "function C() {‸\n}\n", "block_body", "", False, MULTI, "  ", None),
    ("typescriptreact", "const v = useSta‸\n", "identifier", "useSta", True, LINE, "", None),
    # --- Rust
    ("rust", "fn f() {‸}\n", "block_body", "", False, MULTI, "    ", ""),
    ("rust", "fn f() {\n    ‸\n}\n", "block_body", "", False, MULTI, "    ", None),
    ("rust", "impl A {\n    ‸\n}\n", "block_body", "", False, MULTI, "    ", None),
    ("rust", "match x {‸\n}\n", "block_body", "", False, MULTI, "    ", None),
    ("rust", "let s = S {‸};\n", "arguments", "", True, LINE, "", None),
    ("rust", "let v = vec![‸];\n", "arguments", "", True, LINE, "", None),
    ("rust", 'let s = "‸";\n', "string", "", True, LINE, "", None),
    ("rust", "let c = '‸';\n", "string", "", True, LINE, "", None),
    ("rust", "let x = y.unw‸\n", "identifier", "unw", True, LINE, "", None),
    ("rust", "let f = |x| x +‸\n", "line_tail", "", True, LINE, "", None),
    # --- Go
    ("go", "func f() {‸\n}\n", "block_body", "", False, MULTI, "\t", None),
    ("go", "func f() {\n\t‸\n}\n", "block_body", "", False, MULTI, "\t", None),
    ("go", "type S struct {‸}\n", "block_body", "", False, MULTI, "\t", ""),
    ("go", "x := T{‸}\n", "arguments", "", True, LINE, "", None),
    ("go", 's := "‸"\n', "string", "", True, LINE, "", None),
    ("go", "r := `‸`\n", "string", "", True, LINE, "", None),
    ("go", "fmt.Pri‸\n", "identifier", "Pri", True, LINE, "", None),
    ("go", "if err != nil {\n\treturn err\n}\n‸\n", "line", "", False, MULTI, "", None),
    # --- C
    ("c", "int f(void) {‸\n}\n", "block_body", "", False, MULTI, "    ", None),
    ("c", "struct s {‸};\n", "block_body", "", False, MULTI, "    ", ""),
    ("c", "int a[] = {‸};\n", "arguments", "", True, LINE, "", None),
    ("c", 'printf("‸");\n', "string", "", True, LINE, "", None),
    ("c", "int main() {\n    int x = 1;\n    ‸\n}\n", "line", "", False, MULTI, "    ", None),
    ("c", "/* {‸ */\n", "line_tail", "", True, LINE, "", None),
    ("c", "mem‸\n", "identifier", "mem", True, LINE, "", None),
    # --- C++
    ("cpp", "namespace a {‸}\n", "block_body", "", False, MULTI, "    ", ""),
    ("cpp", "class A {\n    ‸\n};\n", "block_body", "", False, MULTI, "    ", None),
    ("cpp", "std::vector<int> v{‸};\n", "arguments", "", True, LINE, "", None),
    ("cpp", 'auto s = "‸";\n', "string", "", True, LINE, "", None),
    ("cpp", "for (int i = 0; i < n; ++i) {‸\n}\n", "block_body", "", False, MULTI, "    ", None),
    ("cpp", "std::cou‸\n", "identifier", "cou", True, LINE, "", None),
    # --- Java
    ("java", "class A {‸}\n", "block_body", "", False, MULTI, "    ", ""),
    ("java", "class A {\n    void f() {‸\n    }\n}\n", "block_body", "", False, MULTI, "        ", None),
    ("java", "int[] a = {‸};\n", "arguments", "", True, LINE, "", None),
    ("java", 'String s = "‸";\n', "string", "", True, LINE, "", None),
    ("java", "System.out.pri‸\n", "identifier", "pri", True, LINE, "", None),
    ("java", "int y = x *‸;\n", "line_tail", "", True, LINE, "", None),
    # --- Lua
    ("lua", "if x then‸\nend\n", "block_body", "", False, MULTI, "  ", None),
    ("lua", "function f(a)\n‸\nend\n", "block_body", "", False, MULTI, "  ", None),
    ("lua", "for i = 1, 10 do‸\nend\n", "block_body", "", False, MULTI, "  ", None),
    ("lua", "repeat‸\nuntil x\n", "block_body", "", False, MULTI, "  ", None),
    ("lua", "while x do\n  y()\n  ‸\nend\n", "line", "", False, MULTI, "  ", None),
    ("lua", "local t = {‸}\n", "arguments", "", True, LINE, "", None),
    ("lua", 'print("‸")\n', "string", "", True, LINE, "", None),
    ("lua", "local x = 1 +‸\n", "line_tail", "", True, LINE, "", None),
    ("lua", "-- if x then‸\n", "line_tail", "", True, LINE, "", None),
    ("lua", "local s = string.fo‸\n", "identifier", "fo", True, LINE, "", None),
    # --- Non-ASCII text before the cursor: tree lookups must use byte offsets
    ("python", "é = 1\nif é:‸\n", "block_body", "", False, MULTI, "    ", None),
    ("python", 'd = {"日本": 1}; x = "‸"\n', "string", "", True, LINE, "", None),
    ("javascript", 'const ü = "日本"; const o = {‸};\n', "arguments", "", True, LINE, "", None),
    ("javascript", 'const ü = "日本"; function f() {‸}\n', "block_body", "", False, MULTI, "  ", ""),
    ("rust", 'let s = "ñ"; let t = "‸";\n', "string", "", True, LINE, "", None),
    ("lua", '-- ü\nlocal s = "ä" if x then‸\nend\n', "block_body", "", False, MULTI, "  ", None),
    # --- Unknown language: line rules only
    ("plaintext", "foo {\n‸\n}\n", "block_body", "", False, MULTI, "    ", None),
    ("plaintext", "key:‸\n", "block_body", "", False, MULTI, "    ", None),
    ("plaintext", "x {‸}\n", "arguments", "", True, LINE, "", None),
    ("plaintext", "f(‸)\n", "arguments", "", True, LINE, "", None),
    ("plaintext", 'a "‸" b\n', "string", "", True, LINE, "", None),
    ("plaintext", "wor‸\n", "identifier", "wor", True, LINE, "", None),
    ("plaintext", "some text‸ here\n", "identifier", "text", True, LINE, "", None),
    ("plaintext", "a = 1 +‸\n", "line_tail", "", True, LINE, "", None),
    ("plaintext", "a\n‸\n", "line", "", False, MULTI, "", None),
    ("haskell", "main = do‸\n", "identifier", "do", True, LINE, "", None),
]


def split_cursor(source: str) -> tuple[str, int]:
    assert source.count(CURSOR) == 1, "a case needs exactly one cursor marker"
    return source.replace(CURSOR, ""), source.index(CURSOR)


@pytest.mark.parametrize(
    "language_id, source, kind, typed, single_line, max_tokens, indent, closer",
    CASES, ids=[f"{c[0]}-{c[1]!r}" for c in CASES])
def test_span_chosen(language_id, source, kind, typed, single_line, max_tokens, indent, closer):
    text, cursor = split_cursor(source)
    plan = plan_span(Snapshot.parse(text, language_id), cursor, PlannerSettings())
    assert (plan.kind, plan.typed_prefix, plan.single_line) == (kind, typed, single_line)
    assert (plan.replace_start, plan.replace_end) == (cursor - len(typed), cursor)
    assert len(plan.request.slots) == 1
    # What the prefix left out (the healed blanks, a word typed halfway) is what the slot must begin with.
    assert plan.request.slots[0].starts_with == plan.healed + typed
    assert plan.request.slots[0].max_tokens == max_tokens
    assert plan.request.slots[0].single_line == single_line
    assert plan.indent == indent
    assert plan.closer_indent == closer
    # The blanks typed before the span go to the model (token healing): the prefix ends before them.
    line_before = text[text.rfind("\n", 0, cursor - len(typed)) + 1: cursor - len(typed)]
    blanks = line_before[len(line_before.rstrip(" \t")):]
    healed = blanks if single_line or blanks == line_before else ""
    assert plan.healed == healed
    assert plan.request.prefix == text[: cursor - len(typed) - len(healed)]
    assert plan.request.suffix == text[cursor:]
    assert plan.line_rest == text[cursor:].split("\n", 1)[0]


def test_every_language_has_cases():
    covered = {c[0] for c in CASES}
    assert covered >= {"python", "javascript", "typescript", "typescriptreact", "rust", "go", "c", "cpp",
                       "java", "lua", "plaintext"}


def test_planned_language_names():
    names = {}
    for language_id in ("python", "typescriptreact", "javascriptreact", "lua", "plaintext"):
        names[language_id] = plan_span(Snapshot.parse("x\n", language_id), 1).language
    assert names == {"python": "python", "typescriptreact": "tsx", "javascriptreact": "javascript",
                     "lua": "lua", "plaintext": None}


def test_settings_change_slot_lengths():
    settings = PlannerSettings(max_span_tokens=100, max_line_tokens=10)
    one_line = plan_span(Snapshot.parse("x = 1 +\n", "python"), 7, settings)
    body = plan_span(Snapshot.parse("def f():\n", "python"), 8, settings)
    assert one_line.request.slots[0].max_tokens == 10
    assert body.request.slots[0].max_tokens == 100


@pytest.mark.parametrize("offset", [-1, 9, 100, 1.5, None, True])
def test_offset_outside_document_is_refused(offset):
    with pytest.raises(ValueError, match="outside the document"):
        plan_span(Snapshot.parse("x = 1\ny\n", "python"), offset)


def test_plan_at_document_edges():
    doc = ParsedDocument("", "python")
    plan = plan_span(doc.snapshot, 0)
    assert (plan.kind, plan.request.prefix, plan.request.suffix) == ("line", "", "")
    doc = ParsedDocument("x = 1", "python")
    assert plan_span(doc.snapshot, 0).kind == "line_tail"
    assert plan_span(doc.snapshot, 5).request.suffix == ""


def test_indent_unit_follows_the_file():
    text = "def a():\n  if x:\n    y()\n  return 1\n\ndef b():\n"
    plan = plan_span(Snapshot.parse(text, "python"), len(text) - 1)
    assert plan.kind == "block_body" and plan.indent_unit == "  " and plan.indent == "  "
    tabbed = "int f() {\n\tint x;\n\tif (x) {\n\t\tg();\n\t}\n}\nint g() {\n}\n"
    cursor = tabbed.rindex("{") + 1
    plan = plan_span(Snapshot.parse(tabbed, "c"), cursor)
    assert plan.kind == "block_body" and plan.indent == "\t"


@pytest.mark.parametrize("bad", [
    {"max_span_tokens": 0}, {"max_line_tokens": -3}, {"context_chars": 0}, {"prefix_share": 1.0},
    {"prefix_share": 0.0}, {"snippet_chars": -1}, {"min_snippet_overlap": 0}, {"prefix_quantum": 0},
])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError, match="PlannerSettings"):
        PlannerSettings(**bad)


def test_a_word_typed_halfway_is_the_slots_start_unless_switched_off():
    text, cursor = split_cursor("def f(naive):\n    return nai‸\n")
    snapshot = Snapshot.parse(text, "python")
    plan = plan_span(snapshot, cursor, PlannerSettings())
    assert plan.request.prefix.endswith("return") and plan.healed == " "
    assert plan.request.slots[0].starts_with == " nai"
    off = plan_span(snapshot, cursor, PlannerSettings(heal_typed=False))
    assert off.request.slots[0].starts_with == "" and off.typed_prefix == "nai"
    # The punctuation before the slot is the engine's to heal (engine/token_healing.py), with the same switch.
    assert plan.request.slots[0].heal_before and not off.request.slots[0].heal_before
