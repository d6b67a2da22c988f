"""``rubricforge formats`` (every format the loaders know: built-in, plugin, mapping) and ``rubricforge map
check`` (try a mapping on data before judging it: docs/MAPPING.md)."""

from __future__ import annotations

import argparse
import json

from rubricforge_dspy.core.errors import InputError

__all__ = ["add_mapping_parsers", "cmd_formats", "cmd_map_check"]


def cmd_formats(args: argparse.Namespace) -> int:
    """Print the registered formats, one per line (``--json``: one JSON object each); ``--map`` adds mappings."""
    from rubricforge_dspy.data.formats import formats
    from rubricforge_dspy.data.formats.mapping import register_mapping

    for path in args.maps or ():
        register_mapping(path)
    rows = [{"name": f.name, "origin": f.origin, "description": f.description, "extensions": list(f.extensions),
             "label_rule": None if f.label_rule is None else str(f.label_rule)} for f in formats()]
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    width = max(len(row["name"]) for row in rows)
    for row in rows:
        rule = f"; label: {row['label_rule']}" if row["label_rule"] else ""
        print(f"{row['name']:<{width}}  {row['origin']}: {row['description']}{rule}")
    return 0


def cmd_map_check(args: argparse.Namespace) -> int:
    """Print what a mapping reads from the data (`MapCheckReport.format`); exit 2 when it does not read it
    cleanly (nothing loaded, a record skipped, a required field empty in more than ``--empty-share`` of records
    (a field marked optional is reported, never failed), or the label leaking into the render: a leak, or a
    token whose presence predicts the label); warnings (a constant label, an error flag marking every result) exit 0."""
    from rubricforge_dspy.pipeline.map_check import check_mapping

    if not 0.0 <= args.empty_share <= 1.0:
        raise InputError(f"--empty-share {args.empty_share}: give a share between 0 and 1")
    data = args.data[0] if len(args.data) == 1 else args.data
    report = check_mapping(data, args.map, empty_share=args.empty_share)
    print(report.format())
    if not report.ok:
        raise InputError(f"the mapping {args.map} does not read {', '.join(args.data)} cleanly (above: "
                         "what matched, what was skipped, which required fields were mostly empty and what leaks "
                         "or predicts the label); "
                         "fix the mapping and check again")
    return 0


def add_mapping_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``formats`` and ``map check`` on the subcommand parser `sub`."""
    p = sub.add_parser("formats", help="list the trajectory formats: built-in, plugins, and mappings given")
    p.add_argument("--map", dest="maps", nargs="+", default=None, metavar="MAP",
                   help="also list these mappings (docs/MAPPING.md)")
    p.add_argument("--json", action="store_true", help="one JSON object per format")
    p.set_defaults(func=cmd_formats)

    p = sub.add_parser("map", help="declarative mappings of agent logs (docs/MAPPING.md)")
    msub = p.add_subparsers(dest="map_command", required=True)
    c = msub.add_parser("check", help="try a mapping on data: matches, skipped records, empty fields, a render")
    c.add_argument("--map", required=True, metavar="MAP", help="the mapping file (.json or .yaml)")
    c.add_argument("--data", required=True, nargs="+", help="the log file(s) or folder the mapping reads")
    c.add_argument("--empty-share", type=float, default=0.5, metavar="S",
                   help="report a required field empty in more than this share of records (default 0.5); a field "
                        "marked {\"path\": ..., \"optional\": true} in the mapping is reported, never failed")
    c.set_defaults(func=cmd_map_check)
