"""For tests of ``python -m pipeline run`` that assert on its events, exports or messages and
never read its HTML report: the run writes a placeholder page instead of drawing the charts
(drawing is most of a small run's CPU; the report's own tests, and the runs that do read the
page, still draw it)."""

from __future__ import annotations

PLACEHOLDER = "<!doctype html><title>report not drawn by this test</title>"


def without_report(monkeypatch) -> None:
    """``run`` in this test writes PLACEHOLDER as its report (everything else unchanged)."""
    from pipeline import report
    from pipeline.commands import run_blocks as block_mode
    monkeypatch.setattr(report, "render_html", lambda *args, **kwargs: PLACEHOLDER)
    monkeypatch.setattr(block_mode, "report_groups", lambda *args, **kwargs: [])
