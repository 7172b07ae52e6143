import pytest

from dllm_lsp.train.licenses import classify, from_expression, from_text


@pytest.mark.parametrize("expr,expected", [
    ("MIT", "MIT"),
    ("MIT OR Apache-2.0", "MIT"),
    ("GPL-3.0-or-later OR MIT", "MIT"),
    ("Apache-2.0 WITH LLVM-exception", "Apache-2.0"),
    ("Apache-2.0 AND CNRI-Python", "Apache-2.0 AND CNRI-Python"),
    ("MIT AND GPL-2.0-only", None),
    ("MPL-2.0", None),
    ("LGPL-3.0", None),
    ("UNLICENSED", None),   # npm: no license granted
    ("Unlicense", "Unlicense"),
])
def test_spdx_expressions(expr, expected):
    assert from_expression(expr) == expected


@pytest.mark.parametrize("text,expected", [
    ("MIT license", "MIT"), ("Apache 2.0", "Apache-2.0"), ("Modified BSD License", "BSD-3-Clause"),
    ("ISC license", "ISC"), ("GNU General Public License v3", None), ("Proprietary", None), ("", None),
])
def test_free_text_names(text, expected):
    assert from_text(text) == expected


def test_classifiers_used_when_fields_say_nothing():
    assert classify(None, "UNKNOWN", ["License :: OSI Approved :: BSD License"]) == "BSD-3-Clause"
    assert classify(None, None, ["License :: OSI Approved :: GNU General Public License v2 (GPLv2)"]) is None
    # A permissive and a copyleft classifier together is ambiguous: not taken.
    assert classify(None, None, ["License :: OSI Approved :: MIT License",
                                 "License :: OSI Approved :: GNU General Public License (GPL)"]) is None
    assert classify(None, None, []) is None


def test_expression_field_wins_over_classifiers():
    assert classify("GPL-3.0-only", None, ["License :: OSI Approved :: MIT License"]) is None
    assert classify(None, "BSD 3-Clause License\n\nCopyright (c) ...", []) == "BSD-3-Clause"
