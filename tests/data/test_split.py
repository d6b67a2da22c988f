from collections import Counter

import pytest

from rubricforge_dspy.data.split import split_by_task
from tests.support.helpers import make_dataset


def test_every_task_lands_in_exactly_one_split_with_trials():
    data = make_dataset(40, trials=4)
    split = split_by_task(data, seed=0)
    tasks = {name: {t.task_id for t in part} for name, part in split.parts().items()}
    assert not (tasks["train"] & tasks["val"]) and not (tasks["train"] & tasks["test"])
    assert not (tasks["val"] & tasks["test"])
    assert sum(len(p) for p in split.parts().values()) == len(data)
    assert Counter(t.id for p in split.parts().values() for t in p) == Counter(t.id for t in data)


def test_split_is_stratified_and_sized():
    data = make_dataset(100)
    summary = split_by_task(data, seed=0).summary()
    for name, expected in (("train", 50), ("val", 15), ("test", 35)):
        assert abs(summary[name]["tasks"] - expected) <= 1  # largest remainder, per stratum
    for part in summary.values():
        assert abs(part["positive_rate"] - 0.5) <= 0.04


def test_split_is_deterministic_for_a_seed_and_varies_across_seeds():
    data = make_dataset(60)
    ids = lambda s: [t.id for t in s.test]
    assert ids(split_by_task(data, seed=3)) == ids(split_by_task(data, seed=3))
    assert ids(split_by_task(data, seed=3)) != ids(split_by_task(data, seed=4))


def test_bad_fractions_are_refused():
    with pytest.raises(ValueError, match="fractions"):
        split_by_task(make_dataset(4), fractions=(0.5, 0.5, 0.5))
