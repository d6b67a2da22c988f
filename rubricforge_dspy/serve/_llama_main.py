"""Run ``python -m llama_cpp.server`` with llama.cpp's extra CPU buffer types (AMX, repack) off.

Run as a script (``python .../_llama_main.py <llama_cpp.server args>``), so the child process
imports neither DSPy nor this package. Why: a llama.cpp built with GGML_NATIVE on a VM that
advertises AMX without enabling it crashes on the first decode (``ldtilecfg`` general protection
fault in ``ggml_backend_amx_mul_mat``, seen on this project's 2-core CPU runner). The model
parameter ``use_extra_bufts`` turns those kernels off; llama-cpp-python does not expose it, so the
default model parameters are wrapped. Set RUBRICFORGE_LLAMA_EXTRA_BUFTS=1 to keep them on.

It also exits when the process that started it is gone (``RUBRICFORGE_PARENT_PID``), so a parent
killed without running its cleanup (SIGKILL, a CI timeout) leaves no orphan server behind.
"""

import os
import threading
import time
from typing import Any


def _disable_extra_buffer_types() -> None:
    import llama_cpp.llama_cpp as lib

    original = lib.llama_model_default_params
    if not any(name == "use_extra_bufts" for name, _ in original().__class__._fields_):
        return

    def default_params() -> Any:
        params = original()
        params.use_extra_bufts = False
        return params

    lib.llama_model_default_params = default_params


def _exit_with_parent(parent: int) -> None:
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


if __name__ == "__main__":
    if os.environ.get("RUBRICFORGE_PARENT_PID", "").isdigit():
        _exit_with_parent(int(os.environ["RUBRICFORGE_PARENT_PID"]))
    if os.environ.get("RUBRICFORGE_LLAMA_EXTRA_BUFTS", "0") != "1":
        _disable_extra_buffer_types()
    from llama_cpp.server.__main__ import main

    main()  # type: ignore[no-untyped-call]  # llama_cpp.server ships no annotations on main
