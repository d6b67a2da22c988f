"""Review: a local web page to see what the judge saw, and label it (``rubricforge review``).

In: a verdict JSONL, the data it was judged on, optionally the frozen program, its run directory and a
``label-next`` file. Out: a labels journal (append-only JSONL, one writer, fsync per line, the last line
per id wins) that every ``--labels`` reads.

Modules:

- :mod:`.server`: `serve` and `ReviewServer` (uvicorn on 127.0.0.1, a random port, a per-run token);
- :mod:`.app`: `create_app`, the Starlette routes and Jinja2 templates (autoescaped);
- :mod:`.security`: the token, CSRF and Content-Security-Policy rules;
- :mod:`.state`: `ReviewInputs` and `ReviewState` (the open review);
- :mod:`.sink`: `LabelSender`, the background worker that hands each saved label to ``on_label`` (MLflow);
- :mod:`.index`: the byte-offset indexes of the verdict file and the data;
- :mod:`.queue`: the order of the work and its filters;
- :mod:`.judge_view`: the rubric, criteria, candidates, diffs, certificate and figures;
- :mod:`.reading`: which render "What the judge read" uses, per verdict line, and what the page says;
- :mod:`.trajectory_view`: the whole trajectory, every step unclipped, in pages;
- :mod:`.labels`: `LabelsFile`, `append_label`, `read_labels` (the journal's format is
  `rubricforge_dspy.data.label_journal`).

Names are imported lazily: importing this package does not import Starlette or uvicorn.
"""

from rubricforge_dspy._lazy import lazy_exports

_MODULES = {
    "rubricforge_dspy.review.server": ["serve", "ReviewServer", "ReviewExposedWarning"],
    "rubricforge_dspy.review.app": ["create_app"],
    "rubricforge_dspy.review.state": ["ReviewInputs", "ReviewState"],
    "rubricforge_dspy.review.labels": ["LabelsFile", "append_label", "read_labels"],
    "rubricforge_dspy.review.index": ["VerdictFileIndex", "DataIndex"],
    "rubricforge_dspy.review.security": ["new_token"],
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
