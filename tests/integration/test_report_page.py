"""The report page in a real browser (headless Chromium): every plot image loads, the summary table is there,
and a broken image is caught. A synthetic run (no model); the real main job's page is checked in
tests/e2e/test_main_command.py."""

from __future__ import annotations

import pytest
from PIL import Image

from rlvr.report import build_report
from tests.helpers.browser import check_page, chromium
from tests.helpers.run_dirs import write_run

pytestmark = pytest.mark.skipif(chromium() is None, reason="headless Chromium is not installed (Debian package "
                                "`chromium`: scripts/setup.sh installs it)")


def test_report_page_shows_every_plot_and_the_summary(tmp_path):
    report = build_report(write_run(tmp_path / "run"))
    page = check_page(report.index, tmp_path / "page.png")
    assert page.images == len(report.images) > 0
    assert page.broken == []
    assert page.summary_cells == ["math", "code", "all"]
    with Image.open(page.screenshot) as shot:
        assert shot.size == (1280, 3000)
        assert len(set(shot.convert("L").resize((64, 150)).getdata())) > 10  # drawn, not a blank page


def test_a_missing_plot_shows_as_a_broken_image(tmp_path):
    report = build_report(write_run(tmp_path / "run"))
    report.images["val_correct"].unlink()
    page = check_page(report.index, tmp_path / "page.png")
    assert page.broken == ["val_correct.png"]
