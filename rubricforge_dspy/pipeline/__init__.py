"""Pipeline: the jobs that run several stages in order, with typed parameters (what the CLI calls).

In: trajectories (or a `Split`), LMs, a preset's sizes. Out: a frozen, certified program
(`run_induce_job`), a run directory with predictions of every judge and its report (`run_protocol`,
`run_demo`), a report of verdict files with the floor rows fit (`report_main`), or the floor report with
the hybrid stage (`run_floor_job`).

Modules:

- :mod:`.induce_job`: split -> induce and freeze -> floor into the manifest -> hybrid -> certify;
- :mod:`.protocol`: the evaluation protocol end to end (`ProtocolConfig`, `run_protocol`);
- :mod:`.demo`: `rubricforge demo` on bundled tau-bench data, sized for the embedded model;
- :mod:`.report_job`: `rubricforge report`, with the floor rows fit when asked;
- :mod:`.floor_job`: `rubricforge floor`: the floor report of labeled data read once, and with a judge the hybrid
  stage; a live judge runs through the resumable, cached job path (`run_floor_job`, `FloorOptions`);
- :mod:`.map_check`: `rubricforge map check`: a mapping run over data, its match counts, empty fields and the
  first record as the judge would read it (`check_mapping`, `MapCheckReport`).

Names are imported lazily, so `rubricforge report` imports the report job and not the induction.
"""

from rubricforge_dspy._lazy import lazy_exports

_MODULES = {
    "rubricforge_dspy.pipeline.induce_job": ["run_induce_job", "InduceJobResult", "induction_split",
                                             "induce_and_freeze"],
    "rubricforge_dspy.pipeline.protocol": ["run_protocol", "ProtocolConfig", "JUDGES"],
    "rubricforge_dspy.pipeline.demo": ["run_demo", "demo_sample", "demo_header"],
    "rubricforge_dspy.pipeline.report_job": ["report_main"],
    "rubricforge_dspy.pipeline.floor_job": ["run_floor_job", "FloorOptions", "FloorJobResult", "FloorData",
                                            "read_floor_data"],
    "rubricforge_dspy.pipeline.map_check": ["check_mapping", "MapCheckReport"],
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
