"""Serving the judge LM: the embedded llama.cpp default, SGLang workers and router, process control.

    with open_lm(LMConfig.from_env()) as lm:      # embedded server unless an api_base is set
        with dspy.context(lm=lm):
            verdict = TrajectoryJudge()(trajectory=...)

``rubricforge serve`` starts the embedded server and prints its endpoint.

In: an `LMConfig` (`rubricforge_dspy.lm`). Out: a `dspy.LM` talking to a running OpenAI-compatible
server, and the server process behind it, stopped for sure on exit. Modules:

- :mod:`.embedded`: the embedded default judge (SmolLM2-135M, GGUF) behind ``llama_cpp.server``;
- :mod:`.process`: start a server as a child process, wait until healthy, stop it;
- :mod:`.sglang`: command lines for SGLang workers and the SGLang router (sglang is never imported);
- ``_llama_main``: runs ``llama_cpp.server`` with llama.cpp's extra CPU buffer types off.
"""

from rubricforge_dspy.serve.embedded import (
    CONTEXT_TOKENS,
    EmbeddedServer,
    EmbeddedUnavailable,
    check_embedded,
    embedded_available,
    embedded_launch_command,
    embedded_lm,
    embedded_model_name,
    find_weights,
    open_lm,
    open_lms,
    prefix_cache_stats,
)
from rubricforge_dspy.serve.process import (
    ServerProcess,
    ServerStartError,
    free_port,
    launch_server,
    probe,
    wait_for_health,
)
from rubricforge_dspy.serve.sglang import served_name, sglang_launch_command, sglang_router_command

__all__ = [
    "CONTEXT_TOKENS", "EmbeddedServer", "EmbeddedUnavailable", "ServerProcess", "ServerStartError",
    "check_embedded", "embedded_available", "embedded_launch_command", "embedded_lm", "embedded_model_name",
    "find_weights", "free_port", "launch_server", "prefix_cache_stats", "probe", "open_lm", "open_lms",
    "served_name", "sglang_launch_command", "sglang_router_command", "wait_for_health",
]
