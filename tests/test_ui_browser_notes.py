"""The method dropdown's notes in a real browser (Chromium, headless, Playwright), apart from
tests/test_ui_browser.py so that the two files' tests run side by side (`pytest --dist loadfile`): every
change of a control's note, between the registry's methods, leaves each control with the new method's
note and state.
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


def note_changes(a: str, b: str, notes: dict) -> set[tuple[str, str, str]]:
    """The (control, note before, note after) changes of a change from method a to method b."""
    return {(n, notes[a][n][0], notes[b][n][0]) for n in notes[a] if notes[a][n][0] != notes[b][n][0]}


def note_walk(names: list[str], notes: dict) -> list[str]:
    """A walk through the registry's methods in which every control's note changes from each of its notes
    to each other one at least once, and every method is visited. A control's note is set whole at each
    change, from the new method alone, so a stale note is the control's note before the change: these
    changes are all that the pairs of methods can show (362 changes for the 24 methods, where all
    ordered pairs are 552). Greedy, from the first method: each step to the method whose change covers
    the most uncovered changes (ties: an unvisited one, then the registry's order); where none covers
    any, to the first method with the note before of an uncovered change."""
    left = {c for a in names for b in names for c in note_changes(a, b, notes)}
    walk, unseen = [names[0]], set(names[1:])
    while left or unseen:
        a = walk[-1]
        b = max((m for m in names if m != a), key=lambda m: (len(note_changes(a, m, notes) & left), m in unseen))
        if not note_changes(a, b, notes) & left and b not in unseen:
            n, before, _ = min(left)
            b = next(m for m in names if m != a and notes[m][n][0] == before)
        left -= note_changes(a, b, notes)
        unseen.discard(b)
        walk.append(b)
    return walk


def test_notes_match_the_method_after_every_method_change(ui, tmp_path):
    """Every change of every control's note (`note_walk`): after each change of method every control's
    note and state are the new method's (never the previous method's "Unused: ..." on a control that is
    enabled again, nor another method's)."""
    from app.ui.handlers import method_info
    from mstta.engine.methods import get_method, list_methods

    names = list(list_methods())
    info = {m: method_info(m) for m in names}
    notes = {m: info[m][1] for m in names}
    other_notes = list(notes.values())
    walk = note_walk(names, notes)
    wanted = {c for a in names for b in names for c in note_changes(a, b, notes)}
    with chromium(tmp_path) as context:
        page = open_page(context, ui.url, preloaded=False)
        tab(page, "Settings")
        seen: set = set()
        for before, after in zip(walk, walk[1:]):
            page.locator("#mstta-method input").click()
            option = page.get_by_role("option", name=get_method(after).title, exact=True)
            option.wait_for(state="visible")
            option.click(force=True)  # visible is enough: the list does not move (no wait for two still frames, 0.3 s)
            summary, now = info[after]
            expected = {n: [note, not used] for n, (note, used) in now.items()}
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
                list(now),
            )
            stale = [
                n for n in now if any(other[n][0] != now[n][0] and other[n][0] in texts[n] for other in other_notes)
            ]
            assert not stale, f"{before} -> {after}: stale notes on {stale}"
            seen |= note_changes(before, after, notes)
        assert seen == wanted and set(walk) == set(names), "every change of every note, every method"
        save_shot(page, tmp_path, "ui_13_notes_after_changes.png")
        assert_clean(page, context)
