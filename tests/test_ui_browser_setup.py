"""Which Chromium the browser tests drive, and what happens without one (no browser started here)."""

from __future__ import annotations

import helpers_ui
import pytest


def test_without_a_browser_the_browser_tests_skip_saying_how_to_get_one(monkeypatch):
    monkeypatch.setattr(helpers_ui, "find_chromium", lambda: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no Chromium found .*apt-get install chromium"):
        helpers_ui.require_chromium()


def test_under_ci_a_missing_browser_is_a_failure_not_a_skip(monkeypatch):
    monkeypatch.setattr(helpers_ui, "find_chromium", lambda: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and no Chromium found"):
        helpers_ui.require_chromium()


def test_a_chromium_is_found_on_path_or_by_env(monkeypatch, tmp_path):
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.delenv("MSTTA_CHROMIUM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert helpers_ui.find_chromium() == str(fake)
    monkeypatch.setenv("MSTTA_CHROMIUM", "/opt/my/chrome")
    assert helpers_ui.find_chromium() == "/opt/my/chrome"
