"""Declarative mappings: read an agent log no shipped reader knows, from a few JMESPath field paths.

A mapping file (JSON, or YAML with PyYAML) says where the records are (a JSON document, a dict of
records, JSON Lines, or one file per record in a folder) and, per record, the id, task, domain, the steps
(a list of steps, two parallel lists of actions and observations, or chat messages with role names
mapped), the final answer, and the reward or label with its rule. docs/MAPPING.md describes the language.

In: a mapping file and data files. Out: `Trajectory` records (`rubricforge_dspy.core`) built with the
shipped readers' step builders, so the render (and what it leaves out: labels, rewards, ``hidden``) is
the same as for a built-in format.

Modules:

- :mod:`.spec`: `load_mapping` (schema check naming the key), `Mapping`, `ValueSetRule`, `MappingError`;
- :mod:`.source`: where the records are (ijson streaming for simple paths, JSON Lines line by line);
- :mod:`.build`: one record -> one `Trajectory`, counting fields that resolved to nothing;
- :mod:`.limits`: the resource limits (mapping size and nesting, YAML aliases, expression size, the evaluation
  budget, the record cap); each ends in one line naming it, exit 2 (docs/MAPPING.md, "Limits");
- :mod:`.reader`: `iter_mapped` (the load loop with a `LoadReport`), `read_mapped`, `make_reader`, `MapStats`,
  `MappedFormat` (a mapping as a format: name, sniff, read, label_rule; ``as_format()`` its `Format` record),
  `register_mapping` (a mapping registered as a format, read by name: ``load_trajectories(..., format=name)``).

``load_trajectories(path, mapping=M)`` (and `iter_trajectories`, `load_examples`...) read through a mapping
without registering it.

The check of a mapping against data, which renders the first record, is `rubricforge_dspy.pipeline.map_check`
(rendering sits above the data layer).
"""

from rubricforge_dspy._lazy import lazy_exports

_MODULES = {
    "rubricforge_dspy.data.formats.mapping.spec": ["Mapping", "MappingError", "ValueSetRule", "load_mapping",
                                                   "parse_mapping"],
    "rubricforge_dspy.data.formats.mapping.reader": ["iter_mapped", "read_mapped", "make_reader", "MapStats",
                                                     "MappedFormat", "register_mapping"],
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _MODULES)
