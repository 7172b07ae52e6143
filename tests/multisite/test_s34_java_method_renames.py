"""Next edits after a Java method's rename.

`dllm/nextEdits` offered nothing when `int area()` became `int surface()`: `this.area()` is a
`method_invocation` (object, name, arguments) whose last named child is the argument list, so the
receiver walk never found the name. Now `this.area()`, the bare `area()` (Java's implicit `this`),
`this::area` and a same-file subclass's `super.area()` follow, and never another receiver's
`x.area()`, a field or local `area`, a nested or anonymous class's own `area`, nor another overload's
call.
"""
from __future__ import annotations

import pytest

from dllm_lsp.syntax.snapshot import Snapshot

from .test_s34_rn_method_renames import renamed

pytestmark = pytest.mark.timeout(120)

JAVA = (
    "class Shape {\n"
    "    int area = 0;\n"
    "    int area() { return 1; }\n"
    "    int twice(Shape other) {\n"
    "        int area = this.area() + area() + other.area() + this.area;\n"
    "        java.util.function.IntSupplier f = this::area;\n"
    "        Runnable r = () -> this.area();\n"
    "        return area + new Object() { int area() { return 2; } int run() { return area(); } }.run();\n"
    "    }\n"
    "    class Part {\n"
    "        int area() { return 3; }\n"
    "        int run() { return this.area() + area(); }\n"
    "    }\n"
    "}\n"
    "class Square extends Shape {\n"
    "    int run() { return super.area() + this.area() + area(); }\n"
    "}\n"
    "class Circle extends Shape {\n"
    "    int area() { return 4; }\n"
    "    int run() { return super.area() + this.area() + area(); }\n"
    "}\n"
    "class Other {\n"
    "    int area() { return 5; }\n"
    "    int run(Shape s) { return area() + this.area() + s.area(); }\n"
    "}\n"
)
JAVA_RENAMED = (
    "class Shape {\n"
    "    int area = 0;\n"                                               # a field: another namespace
    "    int surface() { return 1; }\n"
    "    int twice(Shape other) {\n"
    "        int area = this.surface() + surface() + other.area() + this.area;\n"   # a local, another receiver
    "        java.util.function.IntSupplier f = this::surface;\n"
    "        Runnable r = () -> this.surface();\n"                      # a lambda keeps `this`
    "        return area + new Object() { int area() { return 2; } int run() { return area(); } }.run();\n"
    "    }\n"
    "    class Part {\n"                                                  # a nested class's own method
    "        int area() { return 3; }\n"
    "        int run() { return this.area() + area(); }\n"
    "    }\n"
    "}\n"
    "class Square extends Shape {\n"                                   # inherits it
    "    int run() { return super.surface() + this.surface() + surface(); }\n"
    "}\n"
    "class Circle extends Shape {\n"                                   # overrides it: `this` is its own
    "    int area() { return 4; }\n"
    "    int run() { return super.surface() + this.area() + area(); }\n"
    "}\n"
    "class Other {\n"                                                  # another class
    "    int area() { return 5; }\n"
    "    int run(Shape s) { return area() + this.area() + s.area(); }\n"
    "}\n"
)


def test_a_java_method_rename_follows_this_implicit_this_and_super():
    assert Snapshot.parse(JAVA, "java").error_count() == 0
    assert renamed(JAVA, "int area() { return 1; }", "int surface() { return 1; }", "java") == JAVA_RENAMED
    assert Snapshot.parse(JAVA_RENAMED, "java").error_count() == 0


def test_a_generic_subclass_follows_too():
    before = (
        "class Shape<T> {\n"
        "    int area() { return 1; }\n"
        "}\n"
        "class Square<T> extends Shape<T> {\n"
        "    int run() { return super.area() + area(); }\n"
        "}\n"
    )
    assert renamed(before, "int area()", "int surface()", "java") == (
        "class Shape<T> {\n"
        "    int surface() { return 1; }\n"
        "}\n"
        "class Square<T> extends Shape<T> {\n"
        "    int run() { return super.surface() + surface(); }\n"
        "}\n"
    )


def test_an_overloaded_java_method_renames_only_the_calls_that_fit_it():
    before = (
        "class Shape {\n"
        "    int area() { return 1; }\n"
        "    int area(int scale) { return scale; }\n"
        "    int sum(int... xs) { return xs.length; }\n"
        "    int run() {\n"
        "        java.util.function.IntSupplier f = this::area;\n"
        "        return this.area() + area(2) + this.area(3) + area();\n"
        "    }\n"
        "}\n"
    )
    # `this::area` may be either overload (its target type picks one): it stays
    assert renamed(before, "int area()", "int surface()", "java") == (
        "class Shape {\n"
        "    int surface() { return 1; }\n"
        "    int area(int scale) { return scale; }\n"
        "    int sum(int... xs) { return xs.length; }\n"
        "    int run() {\n"
        "        java.util.function.IntSupplier f = this::area;\n"
        "        return this.surface() + area(2) + this.area(3) + surface();\n"
        "    }\n"
        "}\n"
    )
    assert renamed(before, "int area(int scale)", "int scaled(int scale)", "java") == (
        "class Shape {\n"
        "    int area() { return 1; }\n"
        "    int scaled(int scale) { return scale; }\n"
        "    int sum(int... xs) { return xs.length; }\n"
        "    int run() {\n"
        "        java.util.function.IntSupplier f = this::area;\n"
        "        return this.area() + scaled(2) + this.scaled(3) + area();\n"
        "    }\n"
        "}\n"
    )


def test_a_varargs_overload_takes_the_calls_the_fixed_one_does_not():
    before = (
        "class Log {\n"
        "    void put(String s) { }\n"
        "    void put(String s, Object... rest) { }\n"
        "    void run() { put(\"a\"); put(\"a\", 1); put(\"a\", 1, 2); }\n"
        "}\n"
    )
    # one argument fits both (Java picks the fixed one, but that is not resolved here): it stays
    assert renamed(before, "void put(String s, Object...", "void putAll(String s, Object...", "java") == (
        "class Log {\n"
        "    void put(String s) { }\n"
        "    void putAll(String s, Object... rest) { }\n"
        "    void run() { put(\"a\"); putAll(\"a\", 1); putAll(\"a\", 1, 2); }\n"
        "}\n"
    )


def test_no_java_rename_onto_another_method_or_from_a_call():
    before = (
        "class Shape {\n"
        "    int area() { return 1; }\n"
        "    int twice() { return this.area() * 2; }\n"
        "}\n"
    )
    # `twice` is another method of the class: the definition now names it
    assert renamed(before, "int area()", "int twice()", "java") is None
    # a call changed to name another method is no rename of the definition
    assert renamed(before, "this.area() * 2", "this.size() * 2", "java") is None
