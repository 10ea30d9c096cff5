"""Labels files, prompt templates and truth CSVs: the accepted formats and every one-line error."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.labels import parse_labels, prompt_templates, read_labels
from app.truth import parse_truth, read_truth
from mstta.errors import UserError

ok = contextlib.nullcontext


@pytest.mark.parametrize(
    "data, expected, error",
    [
        # plain LF file
        (b"cat\ndog\n", ["cat", "dog"], ok()),
        # UTF-8 BOM and CRLF endings, no final newline
        (b"\xef\xbb\xbfcat\r\ndog", ["cat", "dog"], ok()),
        # blank lines, comments, surrounding and inner spaces
        (b"# animals\n\n  cat  \n\t# more\nsea   lion\n\n", ["cat", "sea lion"], ok()),
        # non-ASCII names survive
        ("café\nnaïve bird\n".encode(), ["café", "naïve bird"], ok()),
        # empty / only comments
        (b"", None, pytest.raises(UserError, match="no class names")),
        (b"# nothing\n\n", None, pytest.raises(UserError, match="no class names")),
        # one class is not a classification
        (b"cat\n", None, pytest.raises(UserError, match="only one class name")),
        # duplicate (case and spaces ignored), both line numbers reported
        (b"cat\ndog\n\nCat \n", None, pytest.raises(UserError, match="lines 1 and 4")),
        # bytes that are not UTF-8
        (b"cat\n\xff\xfedog\n", None, pytest.raises(UserError, match=r"not UTF-8 text \(byte 0xff at offset 4\)")),
    ],
)
def test_parse_labels(data, expected, error):
    with error:
        assert parse_labels(data, "labels.txt") == expected


_name = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp", "Zs")), min_size=1, max_size=12).filter(
    lambda n: not n.startswith("#")
)


@given(
    names=st.lists(_name, min_size=2, max_size=8, unique_by=str.casefold),
    bom=st.booleans(),
    newline=st.sampled_from(["\n", "\r\n"]),
    pad=st.sampled_from(["", " ", "\t"]),
)
def test_labels_round_trip(names, bom, newline, pad):
    text = newline.join(f"{pad}{n}{pad}" for n in names) + newline + "# end" + newline
    data = ("\ufeff" if bom else "") + text
    assert parse_labels(data.encode("utf-8")) == names


def test_parse_labels_accepts_text_from_a_text_box():
    assert parse_labels("cat\r\ndog\n# x\n") == ["cat", "dog"]


def test_errors_are_one_line_and_name_the_file(tmp_path):
    f = tmp_path / "labels.txt"
    f.write_bytes(b"cat\ndog\ncat\n")
    with pytest.raises(UserError) as exc:
        read_labels(f)
    assert "\n" not in str(exc.value)
    assert str(f) in str(exc.value) and "lines 1 and 3" in str(exc.value)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda p: p / "missing.txt", "no such file"),
        (lambda p: p, "is a folder"),
    ],
)
def test_read_labels_bad_paths(tmp_path, make, match):
    with pytest.raises(UserError, match=match):
        read_labels(make(tmp_path))


@pytest.mark.parametrize(
    "template, expected, error",
    [
        ("a photo of a {}.", ["a photo of a {}."], ok()),
        ("a photo", None, pytest.raises(UserError, match="exactly one")),
        ("{} and {}", None, pytest.raises(UserError, match="exactly one")),
    ],
)
def test_prompt_templates(template, expected, error):
    with error:
        assert prompt_templates(template) == expected


def test_default_templates_are_the_project_ensemble():
    from mstta.data.templates import DEFAULT_TEMPLATES

    assert prompt_templates(None) == list(DEFAULT_TEMPLATES)


NAMES = ["circle", "square", "sea lion"]


@pytest.mark.parametrize(
    "text, lookups, error",
    [
        # header, comments, quoted label with spaces, inclusive ends, gaps unlabelled
        (
            'start_frame,end_frame,label\n# c\n0,9,circle\n20,29,"sea lion"\n',
            {0: 0, 9: 0, 10: None, 20: 2, 29: 2, 30: None},
            ok(),
        ),
        # no header, BOM, case-insensitive labels, unsorted rows
        ("\ufeff10,19,SQUARE\n0,9,circle\n", {5: 0, 15: 1}, ok()),
        ("0,9,circle\n5,12,square\n", None, pytest.raises(UserError, match="lines 1 and 2 overlap")),
        ("0,9,dog\n", None, pytest.raises(UserError, match="line 1: label 'dog' is not in the labels file")),
        ("0,x,circle\n", None, pytest.raises(UserError, match="line 1: frame numbers must be integers")),
        ("9,0,circle\n", None, pytest.raises(UserError, match="line 1: bad range")),
        ("0,9\n", None, pytest.raises(UserError, match="line 1: expected start_frame,end_frame,label")),
        ("start_frame,end_frame,label\n", None, pytest.raises(UserError, match="no frame ranges")),
    ],
)
def test_parse_truth(text, lookups, error):
    with error:
        truth = parse_truth(text, NAMES, "truth.csv")
        assert {f: truth.label_at(f) for f in lookups} == lookups


def test_read_truth_missing_and_not_utf8(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        read_truth(tmp_path / "nope.csv", NAMES)
    bad = tmp_path / "t.csv"
    bad.write_bytes(b"0,9,\xff\n")
    with pytest.raises(UserError, match="not UTF-8"):
        read_truth(bad, NAMES)
