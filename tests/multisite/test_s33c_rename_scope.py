"""dllm/nextEdits renames, where a name is another thing: a function's own parameter of the same
name, and a class's method. Renaming a module's `name` renamed `def greet(name)`'s parameter and
its uses, and `User.name()` (the class's API) too."""
from __future__ import annotations

import pytest

from dllm_lsp.multisite.next_edits import plan_next_edits


def renamed(before: str, after: str, language: str) -> str:
    """`after` with the rename edits nextEdits plans for the change `before` -> `after`."""
    plan = plan_next_edits([before], after, language)
    assert plan is not None and plan.change.kind == "rename"
    for edit in sorted(plan.renames, key=lambda o: -o.start):
        after = after[:edit.start] + edit.new_text + after[edit.end:]
    return after


MODULE = (
    "name = 'app'\n"
    "\n"
    "\n"
    "def greet(name, greeting: str = 'hi'):\n"
    "    return greeting + name\n"
    "\n"
    "\n"
    "def banner(prefix=name):\n"
    "    return prefix + name\n"
    "\n"
    "\n"
    "class User:\n"
    "    def name(self):\n"
    "        return self._name\n"
    "\n"
    "\n"
    "def main():\n"
    "    print(greet(name), (lambda name: name)(1), (lambda x=name: x)())\n"
)


def test_a_module_variable_rename_leaves_parameters_and_methods_of_that_name():
    before = MODULE
    after = before.replace("name = 'app'", "title = 'app'", 1)
    assert renamed(before, after, "python") == (
        "title = 'app'\n"
        "\n"
        "\n"
        "def greet(name, greeting: str = 'hi'):\n"      # its own parameter
        "    return greeting + name\n"
        "\n"
        "\n"
        "def banner(prefix=title):\n"                   # a default value is the module's
        "    return prefix + title\n"
        "\n"
        "\n"
        "class User:\n"
        "    def name(self):\n"                         # a method: the class's API
        "        return self._name\n"
        "\n"
        "\n"
        "def main():\n"
        "    print(greet(title), (lambda name: name)(1), (lambda x=title: x)())\n"
    )


@pytest.mark.parametrize("language, before, expected", [
    ("python",
     "def f(width: int):\n    def g(width):\n        return width\n    return g(width) + width\n",
     "def f(size: int):\n    def g(width):\n        return width\n    return g(size) + size\n"),
    ("javascript",
     "function f(width) {\n  const g = (width) => width * 2;\n  const h = width => width;\n  return g(width) + h(width);\n}\n",
     "function f(size) {\n  const g = (width) => width * 2;\n  const h = width => width;\n  return g(size) + h(size);\n}\n"),
    ("rust",
     "fn f(width: u32) -> u32 {\n    let g = |width: u32| width * 2;\n    g(width) + width\n}\n",
     "fn f(size: u32) -> u32 {\n    let g = |width: u32| width * 2;\n    g(size) + size\n}\n"),
])
def test_a_parameter_rename_stops_at_an_inner_function_with_a_parameter_of_that_name(language, before, expected):
    after = before.replace("width", "size", 1)
    assert renamed(before, after, language) == expected
