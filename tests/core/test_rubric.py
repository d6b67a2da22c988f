import pytest

from rubricforge_dspy.core.rubric import SEED_RUBRIC, parse_criteria, rubric_sha256, without_criterion


def test_seed_rubric_has_named_observable_criteria():
    criteria = parse_criteria(SEED_RUBRIC)
    assert [c.number for c in criteria] == [1, 2, 3, 4, 5, 6]
    assert criteria[2].name == "Grounded claims"
    assert "tool call" in criteria[0].text


def test_without_criterion_removes_exactly_one_line_by_number_or_name():
    reduced = without_criterion(SEED_RUBRIC, 3)
    assert [c.number for c in parse_criteria(reduced)] == [1, 2, 4, 5, 6]
    assert without_criterion(SEED_RUBRIC, "grounded claims") == reduced
    assert len(reduced.splitlines()) == len(SEED_RUBRIC.splitlines()) - 1


def test_unknown_criterion_is_a_clear_error():
    with pytest.raises(KeyError, match="no criterion 9"):
        without_criterion(SEED_RUBRIC, 9)


def test_bare_numbered_lines_and_bold_names_parse():
    rubric = "Intro\n1. **Tool errors**: none unresolved\n2) the final answer is grounded\n"
    criteria = parse_criteria(rubric)
    assert [(c.number, c.name) for c in criteria] == [(1, "Tool errors"), (2, "criterion 2")]
    assert rubric_sha256(rubric) != rubric_sha256(rubric + " ")
