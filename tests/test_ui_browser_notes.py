"""The method dropdown's notes in a real browser (Chromium, headless, Playwright), apart from
tests/test_ui_browser.py so that the two files' tests run side by side (`pytest --dist loadfile`): every
change between two of the registry's methods leaves each control with the new method's note and state.
The server is `mstta-demo` as test_ui_browser.py starts it (`helpers_ui.preloaded_ui`)."""

from __future__ import annotations

import pytest
from helpers_ui import assert_clean, chromium, open_page, preloaded_ui, require_chromium, save_shot, tab

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    require_chromium()
    server = preloaded_ui(tmp_path_factory.mktemp("ui-notes"), 30)
    yield server
    assert server.stop() == 0, server.log()
    assert "Traceback" not in server.log(), server.log()


def method_walk(methods: list[str]) -> list[str]:
    """A walk through every ordered pair of distinct methods (an Euler circuit of the complete directed
    graph): each of the n x (n - 1) changes happens once; with staying put, all n x n transitions."""
    out: list[str] = []
    used: set[tuple[str, str]] = set()

    def visit(a: str) -> None:
        for b in methods:
            if a != b and (a, b) not in used:
                used.add((a, b))
                visit(b)
        out.append(a)

    visit(methods[0])
    return out[::-1]


def test_notes_match_the_method_after_every_method_change(ui, tmp_path):
    """All n x n transitions between the registry's methods: after each change every control's note and
    state are the new method's (never the previous method's "Unused: ..." on a control that is enabled
    again)."""
    from app.ui.handlers import method_info
    from mstta.engine.methods import get_method, list_methods

    names = list(list_methods())
    other_notes = [method_info(m)[1] for m in names]
    walk = method_walk(names)
    assert len(walk) == len(names) * (len(names) - 1) + 1
    with chromium(tmp_path) as context:
        page = open_page(context, ui.url, preloaded=False)
        tab(page, "Settings")
        seen = set()
        for before, after in zip(walk, walk[1:]):
            page.locator("#mstta-method input").click()
            page.get_by_role("option", name=get_method(after).title, exact=True).click()
            summary, notes = method_info(after)
            expected = {n: [note, not used] for n, (note, used) in notes.items()}
            page.wait_for_function(
                """([expected, summary]) => document.querySelector('#mstta-method').innerText.includes(summary)
                   && Object.entries(expected).every(([n, [note, off]]) => {
                       const box = document.querySelector('#mstta-' + n);
                       return box && box.innerText.includes(note) && box.querySelector('input').disabled === off
                           && (off ? box.getAttribute('title') === note : !box.getAttribute('title'));
                   })""",
                arg=[expected, summary],
                timeout=10_000,
            )
            texts = page.evaluate(  # every control's text in one round trip, not one each
                "(names) => Object.fromEntries(names.map((n) => [n, document.querySelector('#mstta-' + n).innerText]))",
                list(notes),
            )
            stale = [
                n for n in notes if any(other[n][0] != notes[n][0] and other[n][0] in texts[n] for other in other_notes)
            ]
            assert not stale, f"{before} -> {after}: stale notes on {stale}"
            seen.add((before, after))
        assert len(seen) == len(names) * (len(names) - 1), "every change between two methods"
        save_shot(page, tmp_path, "ui_13_notes_after_changes.png")
        assert_clean(page, context)
