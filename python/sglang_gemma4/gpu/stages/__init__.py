"""The GPU stages (`scripts/gpu/check.sh STAGE ...`, `python -m sglang_gemma4.gpu.run`): table.py
names each with what it runs, its time limit and its arguments; gates.py and experiments.py turn a
stage into steps (steps.py), commands of the layers below."""
