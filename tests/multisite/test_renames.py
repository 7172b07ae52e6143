"""What a rename found by next edits may touch (earlier versions given directly, no model)."""
from __future__ import annotations

import re

import pytest

from dllm_lsp.multisite.next_edits import plan_next_edits
from dllm_lsp.multisite.sites import apply_outcomes
from dllm_lsp.syntax.snapshot import Snapshot


def accept_all(before: str, after: str, language: str = "python") -> str | None:
    """The text once every edit offered is applied; None when no rename is offered."""
    plan = plan_next_edits([before], after, language)
    if plan is None or plan.change.kind != "rename":
        return None
    starts = [e.start for e in plan.renames]
    assert starts == sorted(starts) and all(a.end <= b.start for a, b in zip(plan.renames, plan.renames[1:]))
    return apply_outcomes(after, plan.renames)


@pytest.mark.parametrize("before, old, new", [
    # another parameter: `def f(a, c, c)` was offered
    ("def f(a, b, c):\n    x = a + b\n    return x\n", "x = a + b", "x = a + c"),
    # another existing function: `def area` became a second `def surface`
    ("def area(w):\n    return w\n\n\ndef surface(w):\n    return 6 * w\n\n\nx = area(1)\ny = area(2)\n",
     "x = area(1)", "x = surface(1)"),
    # another attribute: the parameter `width` was renamed to `size`
    ("def draw(shape, width):\n    shape.width = width\n    return shape\n", "shape.width =", "shape.size ="),
    # another keyword
    ("def draw(width):\n    return Rect(width=width)\n", "Rect(width=", "Rect(size="),
])
def test_a_changed_reference_is_no_rename(before, old, new):
    after = before.replace(old, new)
    assert accept_all(before, after) is None


def test_a_rename_of_a_declaration_to_a_fresh_name_still_renames():
    before = "def f(a, b):\n    x = a + b\n    return x\n"
    after = before.replace("f(a,", "f(first,")
    assert accept_all(before, after) == "def f(first, b):\n    x = first + b\n    return x\n"


METHOD = (
    "def area():\n    return 1\n\n\n"
    "class Shape:\n    def area(self):\n        return area() * 2\n\n"
    "    def twice(self):\n        return self.area() + self.area()\n\n\n"
    "print(area(), Shape().area())\n"
)


def test_a_method_rename_renames_its_calls_on_self_not_the_module_functions():
    """Renaming the method renamed the bare `area()` calls, which call the module-level function
    (NameError once accepted), and left `self.area()` alone."""
    after = METHOD.replace("def area(self)", "def surface(self)")
    assert accept_all(METHOD, after) == after.replace("self.area()", "self.surface()")


def test_a_nested_function_rename_stays_in_its_enclosing_function():
    before = ("def helper():\n    return 0\n\n\n"
              "def outer():\n    def helper():\n        return 1\n    return helper()\n\n\n"
              "x = helper()\n")
    after = before.replace("    def helper():", "    def inner():")
    assert accept_all(before, after) == after.replace("return helper()", "return inner()")


@pytest.mark.parametrize("language, before, expected", [
    ("java", "class Rect {\n    int width;\n    Rect(int width) {\n        this.width = width;\n    }\n}\n",
     "class Rect {\n    int width;\n    Rect(int size) {\n        this.width = size;\n    }\n}\n"),
    ("java", "class A {\n    int width() { return 1; }\n    int f(int width) {\n        return width + width();\n    }\n}\n",
     "class A {\n    int width() { return 1; }\n    int f(int size) {\n        return size + width();\n    }\n}\n"),
    ("go", "package main\n\ntype Rect struct{ width int }\n\nfunc mk(width int) Rect {\n\treturn Rect{width: width}\n}\n",
     "package main\n\ntype Rect struct{ width int }\n\nfunc mk(size int) Rect {\n\treturn Rect{width: size}\n}\n"),
    ("go", "package main\n\nfunc mk(width string) map[string]int {\n\treturn map[string]int{width: 1}\n}\n",
     "package main\n\nfunc mk(size string) map[string]int {\n\treturn map[string]int{size: 1}\n}\n"),
    ("lua", "local function mk(width)\n  local t = {width = width, [width] = 1}\n  return t.width, t:width()\nend\n",
     "local function mk(size)\n  local t = {width = size, [size] = 1}\n  return t.width, t:width()\nend\n"),
    ("rust", "struct Rect { width: u32 }\nfn mk(width: u32) -> Rect {\n    Rect { width }\n}\n",
     "struct Rect { width: u32 }\nfn mk(size: u32) -> Rect {\n    Rect { width: size }\n}\n"),
    ("javascript", "function mk(width) {\n  return { width };\n}\n",
     "function mk(size) {\n  return { width: size };\n}\n"),
])
def test_a_parameter_rename_leaves_fields_keys_and_methods_their_names(language, before, expected):
    """Java, Go, Lua and Rust member and key names are `identifier`s too: a parameter rename
    renamed them, and a JS shorthand `{ width }` was left pointing at a name gone."""
    after = re.sub(r"\((int )?width", r"(\1size", before, count=1)   # the parameter, as the user renames it
    assert accept_all(before, after, language) == expected
    assert Snapshot.parse(expected, language).error_count() == 0


@pytest.mark.parametrize("before, after, expected", [
    # a trailing comment of the statement before is no documentation of the function
    ("LIMIT = 10  # the width limit\ndef area(width):\n    return width * 2\n",
     "LIMIT = 10  # the width limit\ndef area(size):\n    return width * 2\n",
     "LIMIT = 10  # the width limit\ndef area(size):\n    return size * 2\n"),
    # nor a comment a blank line above it; the one right above is
    ("# width of the page\n\n# Area from width.\ndef area(width):\n    return width\n",
     "# width of the page\n\n# Area from width.\ndef area(size):\n    return width\n",
     "# width of the page\n\n# Area from size.\ndef area(size):\n    return size\n"),
    # a one-letter name is no English article, but is a name in :param a: and `a`
    ('def add(a, b):\n    """Add a to b and return a new number.\n\n    :param a: `a` first\n    """\n    return a + b\n',
     'def add(first, b):\n    """Add a to b and return a new number.\n\n    :param a: `a` first\n    """\n    return a + b\n',
     'def add(first, b):\n    """Add a to b and return a new number.\n\n    :param first: `first` first\n    """\n    return first + b\n'),
    # an f-string docstring's `{width}` is one edit, not a reference and a mention on one range
    ('def area(width):\n    f"""Area for {width}."""\n    return width\n',
     'def area(size):\n    f"""Area for {width}."""\n    return width\n',
     'def area(size):\n    f"""Area for {size}."""\n    return size\n'),
])
def test_documentation_edits_reach_only_the_functions_own_documentation(before, after, expected):
    assert accept_all(before, after) == expected
