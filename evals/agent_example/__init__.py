"""Worked example: optimize a `dspy.ReAct` shop agent with the judge as its only reward, then check the
result against the true success checks and run the Goodhart audit.

    python -m evals.agent_example.run --scripted              # offline, scripted agent and judge LMs
    python -m evals.agent_example.run --api-base URL --lm NAME
    python -m evals.agent_example.run                         # the embedded local model

See docs/REWARD_PROXY.md.
"""
