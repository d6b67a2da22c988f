"""The LM layer's copies (lm/copies.py): which LM a judge calls, and job copies that never touch the caller's."""

import dspy

from rubricforge_dspy.judge.module import TrajectoryJudge
from rubricforge_dspy.lm.config import LMConfig
from rubricforge_dspy.lm.copies import one_attempt_lm, resolve_lm, sized_lm
from rubricforge_dspy.lm.engine import make_lm


def endpoint_lm(**kw):
    return make_lm(LMConfig(model="m@r", api_base="http://127.0.0.1:9/v1", **kw))


def test_resolve_lm_prefers_the_given_lm_then_the_judges_then_the_configured_one():
    given, own, configured = endpoint_lm(), endpoint_lm(), endpoint_lm()
    judge = TrajectoryJudge()
    with dspy.context(lm=configured):
        assert resolve_lm(judge) is configured
        judge.set_lm(own)
        assert resolve_lm(judge) is own
        assert resolve_lm(judge, given) is given
    assert resolve_lm(object(), given) is given


def test_one_attempt_copy_makes_one_attempt_with_no_response_cache_and_leaves_the_original():
    lm = endpoint_lm(timeout=30.0)
    copy = one_attempt_lm(lm, timeout=5.0)
    assert copy is not lm and copy.num_retries == 0 and copy.cache is False
    assert copy.engine.config.timeout == 5.0 and lm.engine.config.timeout == 30.0
    not_an_lm = object()
    assert one_attempt_lm(not_an_lm) is not_an_lm and sized_lm(not_an_lm, connections=9) is not_an_lm
    assert sized_lm(lm) is lm  # nothing to change: no copy
