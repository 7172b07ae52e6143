"""Small files with holes, imports and functions, one per language, shared by the tests."""

HOLES = {
    "python": (
        "import os\n"
        "\n"
        "\n"
        "def area(width, height):\n"
        "    \"\"\"Area of a rectangle.\"\"\"\n"
        "    ...\n"
        "\n"
        "\n"
        "class Shape:\n"
        "    def name(self):\n"
        "        pass\n"
        "\n"
        "    def sides(self):\n"
        "        # TODO: count the sides\n"
        "        raise NotImplementedError(\"sides\")\n"
        "\n"
        "\n"
        "total = 0  # TODO this trailing note is no hole\n"
    ),
    "typescript": (
        "import { readFileSync } from \"fs\";\n"
        "\n"
        "export function area(width: number, height: number): number {\n"
        "  // TODO: multiply\n"
        "}\n"
        "\n"
        "function scale(x: number): number {\n"
        "  return x * /* TODO */ 2;\n"
        "}\n"
    ),
    "rust": (
        "use std::fmt;\n"
        "\n"
        "fn area(width: u32, height: u32) -> u32 {\n"
        "    todo!()\n"
        "}\n"
        "\n"
        "fn main() {\n"
        "    // TODO print the area\n"
        "    let x = unimplemented!();\n"
        "}\n"
    ),
}

# (language, hole texts in document order)
HOLE_TEXTS = {
    "python": ["...", "pass", "# TODO: count the sides", "raise NotImplementedError(\"sides\")"],
    "typescript": ["// TODO: multiply", "/* TODO */"],
    "rust": ["todo!()", "// TODO print the area", "unimplemented!()"],
}

RENAMES = {
    # language, text, the parameter to rename (first occurrence after the opening parenthesis)
    "python": (
        "def area(width, height):\n"
        "    \"\"\"Area from width and height.\"\"\"\n"
        "    double = width + width\n"
        "    return obj.width * height\n"
        "\n"
        "\n"
        "def other(width):\n"
        "    return width\n"
    ),
    "typescript": (
        "/** @param width the width */\n"
        "export function area(width: number, height: number): number {\n"
        "  const w2 = width + width;\n"
        "  return obj.width * height;\n"
        "}\n"
        "function other(width: number) { return width; }\n"
    ),
    "rust": (
        "/// Uses `width`.\n"
        "fn area(width: u32, height: u32) -> u32 {\n"
        "    let w2 = width + width;\n"
        "    s.width * height\n"
        "}\n"
        "fn other(width: u32) -> u32 { width }\n"
    ),
}
# references of `width` inside area() that a rename must reach (documentation included),
# as (line, column) of their first character
RENAME_SITES = {
    "python": [(1, 17), (2, 13), (2, 21)],
    "typescript": [(0, 11), (0, 21), (2, 13), (2, 21)],
    "rust": [(0, 10), (2, 13), (2, 21)],
}

SIGNATURES = {
    # language, text before, text after (a parameter added)
    "python": (
        "def scale(x):\n    return x\n\n\nprint(scale(1), scale(2))\nshape.scale(3)\n",
        "def scale(x, factor):\n    return x\n\n\nprint(scale(1), scale(2))\nshape.scale(3)\n",
    ),
    "typescript": (
        "function scale(x: number): number { return x; }\nconst a = scale(1) + scale(2);\nshape.scale(3);\n",
        "function scale(x: number, factor: number): number { return x; }\nconst a = scale(1) + scale(2);\nshape.scale(3);\n",
    ),
    "rust": (
        "fn scale(x: u32) -> u32 { x }\nfn main() { let a = scale(1) + scale(2); shape.scale(3); }\n",
        "fn scale(x: u32, factor: u32) -> u32 { x }\nfn main() { let a = scale(1) + scale(2); shape.scale(3); }\n",
    ),
}
# (line, start column, end column) of each call's argument text after the change
CALL_ARGUMENTS = {
    "python": [(4, 12, 13), (4, 22, 23), (5, 12, 13)],
    "typescript": [(1, 16, 17), (1, 27, 28), (2, 12, 13)],
    "rust": [(1, 26, 27), (1, 37, 38), (1, 53, 54)],
}

CALL_CHANGES = {
    # language: (text before, the call changed by the user: before -> after)
    language: (before, "scale(1)", "scale(1, 10)") for language, (before, _) in SIGNATURES.items()
}
# after `scale(1)` became `scale(1, 10)`: (line, start column, end column) of the definition's
# parameters and of the other calls' arguments
CALL_CHANGE_SITES = {
    "python": [(0, 10, 11), (4, 26, 27), (5, 12, 13)],
    "typescript": [(0, 15, 24), (1, 31, 32), (2, 12, 13)],
    "rust": [(0, 9, 15), (1, 41, 42), (1, 57, 58)],
}


def changed_call(language: str) -> tuple[str, str]:
    before, old_call, new_call = CALL_CHANGES[language]
    at = before.index(old_call, before.index("\n"))
    return before, before[:at] + new_call + before[at + len(old_call):]
