"""The report's provenance block: which measured file was used, synthetic or real."""

from __future__ import annotations

import html


def provenance_block(provenance: dict) -> str:
    """HTML paragraph(s) from measured_source.json's fields (source, sha256, synthetic, note),
    plus, when given, ``setup`` (the measured setup in words) and ``prediction_note`` (why
    the TTFT predictions are withheld)."""
    synthetic = bool(provenance.get("synthetic"))
    kind = ("the bundled <strong>SYNTHETIC</strong> stand-in, not a real measurement"
            if synthetic else "the <strong>real</strong> measurement file")
    source, digest, note = (html.escape(str(provenance.get(key) or ""))
                            for key in ("source", "sha256", "note"))
    note_html = f"<p>Note: {note.rstrip('.')}.</p>" if note else ""
    setup = provenance.get("setup")
    if setup:          # the setup it was measured under (pipeline.ttft.measured_setup)
        note_html += (f"<p>Measured under {html.escape(str(setup))}; its requests are "
                      f"attributed to tiers under that setup, not the swept one.</p>")
    if provenance.get("prediction_note"):
        note_html += f"<p><strong>{html.escape(provenance['prediction_note'])}.</strong></p>"
    return (f'<div class="provenance {"synthetic" if synthetic else "real"}">'
            f"<p>Measured input: {kind}.</p>"
            f"<p>Source <code>{source}</code> (sha256 <code>{digest}</code>).</p>"
            f"{note_html}</div>")
