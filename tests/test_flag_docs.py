"""The docs' flag tables equal the argparse parsers (issue 33): every `mstta-bench` command's table
is generated (`python -m mstta.commands.flagdocs`), and a parser change without it fails here."""

from __future__ import annotations

from mstta.cli import SUBCOMMANDS
from mstta.commands import flagdocs


def test_every_command_has_a_generated_flag_table_and_none_is_stale():
    text = "".join(p.read_text(encoding="utf-8") for p in flagdocs.DOCS.glob("*.md"))
    assert {m.group(2) for m in flagdocs.BLOCK.finditer(text)} == set(SUBCOMMANDS)
    assert flagdocs.stale() == [], "run: python -m mstta.commands.flagdocs"


def test_a_changed_help_makes_the_table_stale(tmp_path):
    page = tmp_path / "x.md"
    page.write_text("<!-- flags: replay -->\n| flag | meaning |\n| --- | --- |\n<!-- /flags -->\n", encoding="utf-8")
    assert flagdocs.stale(tmp_path) == ["x.md"]
    page.write_text(flagdocs.render(page.read_text(encoding="utf-8")), encoding="utf-8")
    assert flagdocs.stale(tmp_path) == []
    table = flagdocs.flag_table("replay")
    assert "`--search-on-labels`" in table and "dpe+ms" in table  # point 9: the full --method list


def test_help_says_the_true_defaults():
    field = flagdocs.flag_table("field")
    assert "results folder (default field-results/)" in field  # not results/ (point 9)
    assert "mstta-digits" in flagdocs.flag_table("extract") and "mstta-digits" in flagdocs.flag_table("run")
    assert "`--text SETS`" in field and "peer (default" in field
