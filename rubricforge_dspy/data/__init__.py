"""Data: agent trajectories in, from any supported format, with labels joined and splits made.

In: result files, traces and agent logs (a file, a directory, or a list of them; docs/FORMAT.md), and
optionally a separate label file. Out: `Trajectory` records (`rubricforge_dspy.core`; ``label=None``
when unlabeled), a `LoadReport` of what was skipped and why, a `LabelJoin`, ``dspy.Example``s,
by-task train/validation/test splits, and the generic JSONL export.

Modules:

- :mod:`.formats`: one loader per source format, each declared as one `Format` record in a registry
  (`register_format` adds one of your own; installed plugins register the same way; ``formats.formats()``
  lists them with their origin), format detection, `load_trajectories` (a `Trajectories` list with
  ``.report``);
- :mod:`.formats.mapping`: declarative mappings (docs/MAPPING.md): read a log no format knows from a few
  JMESPath field paths (`load_mapping`, ``load_trajectories(path, mapping=...)``, `register_mapping`);
- :mod:`.labels`: read a label file and join it onto trajectories by id (`join_labels`, a `Joined` list
  with ``.report``);
- :mod:`.label_ratings`: several labelers' labels, read and resolved to one per id (`LabelReading`,
  `resolve_ratings`; re-exported by :mod:`.labels`);
- :mod:`.examples`: the data as ``dspy.Example``s (`load_examples`, `to_examples`; imports DSPy);
- :mod:`.label_checks`: loud checks on the labels a command is about to use (`LabelTally`);
- :mod:`.stats`: counts of an input in one streaming pass (`DataStats`, `rubricforge stats`);
- :mod:`.split`: by-task, class-stratified splits (`split_by_task`; imports numpy);
- :mod:`.export`: write trajectories as the generic JSONL (`rubricforge convert`);
- :mod:`.sessions`: the traces of one session as one trajectory (`group_sessions`, ``--session-key``);
- :mod:`.spec`: what data a command or job reads and how, as one frozen record (`DataSpec`).

Names are imported lazily, so loading trajectories does not import numpy (nor DSPy).
"""

from rubricforge_dspy._lazy import lazy_exports

_MODULES = {
    "rubricforge_dspy.data.formats": ["load_trajectories", "iter_trajectories", "LoadReport", "Trajectories",
                                      "detect_format", "default_label_rule", "FORMATS", "Format", "FileSample",
                                      "register_format", "unregister_format"],
    "rubricforge_dspy.data.formats.mapping": ["load_mapping", "register_mapping", "iter_mapped", "Mapping",
                                              "MappingError"],
    "rubricforge_dspy.data.formats.plugins": ["PluginError"],
    "rubricforge_dspy.data.labels": ["join_labels", "read_label_file", "LabelFile", "LabelJoin", "JoinReport",
                                     "Joined", "LabelFileError"],
    "rubricforge_dspy.data.examples": ["load_examples", "to_examples", "Examples", "ExamplesReport"],
    "rubricforge_dspy.data.label_checks": ["LabelTally"],
    "rubricforge_dspy.data.stats": ["DataStats"],
    "rubricforge_dspy.data.split": ["Split", "split_by_task", "sample_by_task", "DEFAULT_FRACTIONS"],
    "rubricforge_dspy.data.export": ["convert_trajectories", "record_of"],
    "rubricforge_dspy.data.sessions": ["group_sessions", "SessionReport", "SessionError"],
    "rubricforge_dspy.data.spec": ["DataSpec", "DataSpecError"],
    "rubricforge_dspy.core.trajectory": ["TrajectoryFormatError"],
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
