"""Judge: the DSPy Module that applies a rubric to a trajectory, and everything that runs it.

In: a `Trajectory` (or its rendered text) and an LM (`dspy.configure`/`dspy.context`, or the judge's
own). Out: a `dspy.Prediction` with the contract's fields (strict: a bad answer raises
`VerdictFormatError`), or through `judge_verdict`/`ajudge_verdict` a `Verdict` record that never raises.

Modules:

- :mod:`.contract`: `BaseJudge`, the one contract of every judge (call, async, batch, Prediction fields);
- :mod:`.module`: the Signature `TrajectoryVerdictSignature`, the strict JSON adapter, `TrajectoryJudge`;
- :mod:`.loading`: `load_judge`: a saved judge file -> the judge it describes (plain, hybrid or floor);
- :mod:`.execution`: `judge_verdict` / `ajudge_verdict`: one strict call -> one recorded `Verdict` with
  its attempts, transient errors retried;
- :mod:`.batching`: `judge_batch` / `ajudge_batch`: the one in-memory batch engine (a bounded window of calls,
  results in input order, failures counted, the dead-server circuit) behind ``batch``/``abatch``, the
  cascade's stages, the rewards and the induction's loops;
- :mod:`.fingerprint`: sha256 digests of everything that changes a judge's answer;
- :mod:`.cache`: the verdict cache (disk and memory back ends), keyed by that fingerprint;
- :mod:`.operating_point`: calibrated scores and the Neyman-Pearson pass threshold;
- :mod:`.floor`: `SymptomFloor`, the logistic regression over observable features (plain JSON), and
  `FloorJudge`, the floor behind the contract;
- :mod:`.hybrid`: `HybridJudge`, the LLM judge's score stacked with the floor's features;
- :mod:`.cascade`: `Cascade`, judges in order (the free floor first), each deciding only past its
  certified thresholds, the rest escalated to a person (`trust.cascade.fit_cascade` fits it);
- :mod:`.recorded`: any judge as a stage: `RecordedJudge` (another tool's verdicts, looked up by id, frozen
  by the file's sha256; its lines' rules in :mod:`.recorded_lines`) and `CallableJudge` (a callable returning a
  Verdict, saved by import path);
- :mod:`.baselines`: the baseline judges of the evaluation protocol;
- :mod:`.metric`: `as_metric`: the judge as a DSPy metric (a reward proxy).

Names are imported lazily: the cache, the fingerprint and the operating point do not need DSPy.
"""

from rubricforge_dspy._lazy import lazy_exports

_MODULES = {
    "rubricforge_dspy.judge.contract": ["BaseJudge", "Verdicts", "verdict_prediction"],
    "rubricforge_dspy.judge.module": ["TrajectoryJudge", "TrajectoryVerdictSignature", "judge_signature",
                                      "StrictJSONAdapter", "VerdictFormatError", "verdict_from_fields"],
    "rubricforge_dspy.judge.loading": ["load_judge"],
    "rubricforge_dspy.judge.execution": ["judge_verdict", "ajudge_verdict", "as_verdict", "RetryPolicy"],
    "rubricforge_dspy.judge.batching": ["judge_batch", "ajudge_batch"],
    "rubricforge_dspy.judge.fingerprint": ["judge_fingerprint"],
    "rubricforge_dspy.judge.cache": ["VerdictCache", "open_cache"],
    "rubricforge_dspy.judge.operating_point": ["Calibration", "CalibrationError", "Threshold",
                                               "neyman_pearson_threshold"],
    "rubricforge_dspy.judge.floor": ["SymptomFloor", "FloorJudge", "FloorError"],
    "rubricforge_dspy.judge.hybrid": ["HybridJudge", "freeze_hybrid"],
    "rubricforge_dspy.judge.cascade": ["Cascade", "StageRule", "CascadeVerdicts", "read_cascade", "is_cascade_file"],
    "rubricforge_dspy.judge.recorded": ["RecordedJudge", "CallableJudge", "as_stage"],
    "rubricforge_dspy.judge.baselines": ["geval_judge", "fewshot_judge"],
    "rubricforge_dspy.judge.metric": ["as_metric", "JudgeMetric", "label_agreement", "LabelAgreement"],
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
