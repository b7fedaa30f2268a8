"""The calculator page's "Launch configs" expander: the current view as a ready-to-run file for each framework that
runs its mode (calculator.exports), each a download, with what each format cannot express listed under it.

Lazy: nothing is built until the expander is opened (on_change="rerun" makes `.open` known), so the page pays for
one closed expander per rerun."""
from __future__ import annotations

import streamlit as st

from dashboard.safe_text import md, md_lines

TITLE = "Launch configs: DeepSpeed, accelerate, torchtitan, Megatron-LM, TrainingArguments, vLLM, SGLang"


def files(result) -> list:
    """(format, label, Export) for every format of the view's mode."""
    from calculator.exports import LABELS, export, formats_for
    return [(fmt, LABELS[fmt], export(result.model, result.workload, fmt))
            for fmt in formats_for(result.workload.mode)]


def panel(result) -> None:
    box = st.expander(TITLE, on_change="rerun", icon=":material/rocket_launch:")
    if not box.open:
        return
    made = files(result)
    box.caption("Each file sets this view's layout, batch, precision, optimizer and recompute with the framework's "
                "own keys (checked against the release named). What a format cannot express is listed, never dropped.")
    row = box.container(horizontal=True, gap="small")
    for fmt, label, out in made:
        row.download_button(label, out.text, out.filename, out.media_type, on_click="ignore",
                            icon=":material/download:")
    box.markdown("\n\n".join(
        f"**{md(label)}** ({md(out.target)}): "
        + ("everything expressed." if not out.warnings else f"not expressed:\n\n{md_lines(out.warnings)}")
        for _, label, out in made))
