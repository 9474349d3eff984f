"""The parts of bench/gpu_check.sh, the one script that builds, tests and benchmarks the CUDA
path: how a step runs and is recorded (step_runner.sh), the steps' commands that are
functions (commands.sh), the MPS daemon (mps.sh), the machine's facts (facts.py) and the one
table (summary.py). The Python parts run from the checkout's root as `python3 -m
bench.gpu.facts ...` and `python3 -m bench.gpu.summary ...`.
"""
