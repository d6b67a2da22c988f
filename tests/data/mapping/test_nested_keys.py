"""Records keyed two (or more) levels deep (``{category: {trial: record}}``, as ADaPT's ALFWorld results are):
the records path ``*.*``, ``key()`` / ``$key`` the innermost member name and ``key(n)`` the name at level n
(docs/MAPPING.md, "Functions")."""

from __future__ import annotations

import json

import pytest

from rubricforge_dspy.data.formats import LoadReport
from rubricforge_dspy.data.formats.mapping import MapStats, iter_mapped, load_mapping
from rubricforge_dspy.data.formats.mapping.functions import key_literals

# the shape of archiki/ADaPT results/ADaPT_maxd3_alfworld_text_davinci_003.json: categories of trials, trial
# keys "<task>/<trial>" (unique only with their category in general), a reward that is true, false or 0, and
# an "overall" summary beside the categories (its members are no records: the filter leaves them out)
ALFWORLD = {
    "pick_and_place": {
        "pick_and_place_simple-Mug-None-Desk-308/trial_T20190908_125200_737896": {
            "problem": "Your task is to: put a mug in desk.",
            "trace": " go to desk 1\nYou arrive at the location.\n> put mug 1 in/on desk 1\nYou put the mug 1.",
            "plans": ["put a mug in desk. at depth 1, success: True"], "reward": True},
        "pick_and_place_simple-Pencil-None-Shelf-308/trial_T20190908_122154_042763": {
            "problem": "Your task is to: put a pencil in shelf.",
            "trace": " go to drawer 1\nThe drawer 1 is closed.",
            "plans": ["put a pencil in shelf. at depth 1, success: False"], "reward": 0},
    },
    "look_at_obj": {
        "look_at_obj_in_light-Pen-None-DeskLamp-308/trial_T20190908_144951_587345": {
            "problem": "Your task is to: look at pen under the desklamp.",
            "trace": " go to desk 1\nOn the desk 1, you see a pen 1.",
            "plans": ["look at pen under the desklamp. at depth 1, success: False"], "reward": False},
    },
    "overall": {"rate": 0.7985074626865671, "success": [22, 21], "count": [24, 31]},
}
INNER = [key for category, trials in ALFWORLD.items() if category != "overall" for key in trials]


def _write(tmp_path, mapping, data=ALFWORLD):
    (tmp_path / "map.json").write_text(json.dumps(mapping), encoding="utf-8")
    (tmp_path / "alfworld.json").write_text(json.dumps(data), encoding="utf-8")
    return tmp_path / "alfworld.json", load_mapping(tmp_path / "map.json")


def _mapping(**fields):
    return {"name": "adapt_alfworld", "records": {"from": "json", "path": "*.*", "filter": "problem"},
            "task": "problem", "steps": {"path": "split(trace, '\n> ')", "action": "split(@, '\n')[0]",
                                         "observation": "split(@, '\n')[1]"},
            "label": {"field": "reward", "pass": [True], "fail": [False, 0]}, "hidden": {"plans": "plans"},
            **fields}


def test_key_is_the_inner_member_name_and_key_n_the_level(tmp_path):
    """`task_id: key()` is the trial's key (not a list index), `key(0)` the category, and `join` builds an id
    unique across categories from both; `$key` is the inner key too."""
    data, mapping = _write(tmp_path, _mapping(id="join('/', [key(0), key()])", task_id="key()", domain="key(0)",
                                              agent="$key"))
    stats = MapStats()
    loaded = list(iter_mapped(data, mapping, stats=stats))
    assert [t.task_id for t in loaded] == INNER
    assert [t.agent for t in loaded] == INNER
    assert [t.domain for t in loaded] == ["pick_and_place", "pick_and_place", "look_at_obj"]
    assert [t.id for t in loaded] == [f"{t.domain}/{t.task_id}" for t in loaded]
    assert [t.label for t in loaded] == [1, 0, 0]
    assert stats.filtered == 3 and stats.records == 3  # the three members of "overall" are left out, counted


def test_the_default_id_names_every_level(tmp_path):
    data, mapping = _write(tmp_path, _mapping(task_id="key()"))
    ids = [t.id for t in iter_mapped(data, mapping)]
    assert ids[0] == f"alfworld:pick_and_place/{INNER[0]}" and len(set(ids)) == 3


def test_key_with_a_backquoted_level_and_a_negative_level(tmp_path):
    """``key(`1`)`` is JMESPath's own spelling of ``key(1)``; ``key(-1)`` is the innermost level; a
    ``'key(0)'`` inside a string literal is text, left alone."""
    data, mapping = _write(tmp_path, _mapping(task_id="key(`1`)", agent="key(-1)",
                                              domain="join('', ['key(0)=', key(0)])"))
    first = next(iter(iter_mapped(data, mapping)))
    assert first.task_id == first.agent == INNER[0] and first.domain == "key(0)=pick_and_place"
    assert key_literals("join('/', [key(0), 'key(1)', key( -1 )])") == "join('/', [key(`0`), 'key(1)', key( `-1` )])"


def test_a_level_the_records_path_does_not_have_is_a_bad_record_naming_the_levels(tmp_path):
    data, mapping = _write(tmp_path, _mapping(task_id="key(2)"))
    report = LoadReport()
    assert list(iter_mapped(data, mapping, on_error="skip", report=report)) == []
    assert len(report.skipped) == 3
    problem = report.skipped[0][2]
    assert "key(2)" in problem and "2 level(s) of member names (key(0) .. key(1))" in problem


def test_a_level_that_is_not_a_whole_number_is_refused(tmp_path):
    data, mapping = _write(tmp_path, _mapping(task_id="key(`0.5`)"))
    with pytest.raises(Exception, match=r"key\(n\): n must be a whole number"):
        list(iter_mapped(data, mapping))


def test_three_levels_under_a_prefix(tmp_path):
    """``run.by_model.*.*.*``: the records three objects down, every level's name kept."""
    nested = {"run": {"by_model": {"gpt-4": {"bash": {"t1": {"q": "ls", "r": 1}, "t2": {"q": "pwd", "r": 0}}},
                                   "llama": {"sql": {"t1": {"q": "select", "r": 1}}}}}}
    mapping = {"name": "three", "records": "run.by_model.*.*.*", "id": "join(':', [key(0), key(1), key(2)])",
               "task_id": "key()", "agent": "key(0)", "domain": "key(1)", "task": "q", "reward": "r"}
    data, loaded_mapping = _write(tmp_path, mapping, nested)
    loaded = list(iter_mapped(data, loaded_mapping))
    assert [t.id for t in loaded] == ["gpt-4:bash:t1", "gpt-4:bash:t2", "llama:sql:t1"]
    assert [(t.agent, t.domain, t.task_id) for t in loaded][-1] == ("llama", "sql", "t1")


def test_one_level_key_n_is_the_member_name(tmp_path):
    """A dict of records (``*``): ``key(0)`` and ``key()`` are both the member name."""
    data, mapping = _write(tmp_path, {"name": "flat", "records": "*", "task_id": "key(0)", "agent": "key()",
                                      "task": "problem", "reward": "score"},
                           {"fixed_0": {"problem": "buy", "score": 1}, "fixed_1": {"problem": "sell", "score": 0}})
    read = [(t.task_id, t.agent) for t in iter_mapped(data, mapping)]
    assert read == [("fixed_0", "fixed_0"), ("fixed_1", "fixed_1")]


def test_a_nested_record_past_the_cap_is_named_and_ends_the_stream(tmp_path, monkeypatch):
    """The nested stream is bounded as the flat one: a record over the record cap is a bad record naming it."""
    monkeypatch.setenv("RUBRICFORGE_MAX_RECORD_MB", "1")
    big = {"a": {"small": {"problem": "p", "trace": " x\ny", "reward": True},
                 "huge": {"problem": "p", "trace": " x\n" + "y" * (3 << 20), "reward": True}}}
    data, mapping = _write(tmp_path, _mapping(task_id="key()"), big)
    report = LoadReport()
    loaded = list(iter_mapped(data, mapping, on_error="skip", report=report))
    assert [t.task_id for t in loaded] == ["small"]
    assert len(report.skipped) == 1 and "record cap" in report.skipped[0][2]


def test_the_shipped_adapt_webshop_dump_keys_its_records(tmp_path):
    """The real ADaPT dump (evals/data/adapt: ``{fixed_i: record, overall: summary}``) read with ``*``:
    ``key()`` and ``key(0)`` are the ``fixed_i`` names; the summary is left out by the filter, counted."""
    from tests.support.helpers import REPO

    data = REPO / "evals" / "data" / "adapt" / "ADaPT_maxd3_webshop_gpt-3.5-turbo.json"
    (tmp_path / "map.json").write_text(json.dumps(
        {"name": "adapt_webshop", "records": {"from": "json", "path": "*", "filter": "problem"},
         "id": "key(0)", "task_id": "key()", "task": "problem", "actions": "action_history", "reward": "score",
         "label": "reward >= 1"}), encoding="utf-8")
    stats = MapStats()
    loaded = list(iter_mapped(data, load_mapping(tmp_path / "map.json"), stats=stats))
    assert [t.id for t in loaded] == [f"fixed_{i}" for i in range(100)] and stats.filtered == 1
    assert all(t.task_id == t.id for t in loaded) and sum(t.label for t in loaded) == 44  # SOURCES.md: r=1:44
