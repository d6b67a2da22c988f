"""Integrations with the platforms where agent traces, human labels and evals already live.

Optional extras, one module each; each module imports its platform when it is imported itself, so
``import rubricforge_dspy.integrations`` needs neither:

- `rubricforge_dspy.integrations.mlflow` (``pip install "rubricforge-dspy[mlflow]"``): pull MLflow
  traces with their HUMAN label assessments (`load_mlflow_traces`), write verdicts back as LLM-judge
  assessments (`log_verdicts_to_mlflow`), a frozen judge as an ``mlflow.genai`` scorer (`scorer`), and
  the traces ``label-next`` picks tagged for labeling in MLflow's UI (`tag_for_labeling`); and
  `rubricforge_dspy.integrations.mlflow_labels`: the review page's labels logged as HUMAN feedback as
  they are saved (`HumanLabelSink`, ``rubricforge review --to-mlflow``).
- `rubricforge_dspy.integrations.inspect` (``pip install "rubricforge-dspy[inspect]"``): a frozen judge
  as an Inspect AI scorer (`rubricforge_scorer`).
- `rubricforge_dspy.integrations.recorded`: another platform's judge as a recorded cascade stage: an MLflow
  assessment (`mlflow_recorded`, the mlflow extra, imported when called) or an Inspect log's score
  (`inspect_recorded`, read by the package's own log reader), ``cascade fit --stage mlflow:...|inspect:...``.

Both map the platform's own records through the file loaders of `rubricforge_dspy.data.formats`
(``otel`` for MLflow traces, ``inspect_ai`` for Inspect messages), so a trace judged live renders as
the same trace exported to a file. See docs/INTEGRATIONS.md.

No names are re-exported here (``__all__`` is empty): each integration's names live in its module, so
that touching one never imports a platform the user did not ask for.
"""

from rubricforge_dspy._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {})
