"""The test suite's helpers, apart from its tests: the layers and their rules (layers.py), worlds
of rank processes (process_world.py), torchrun with each rank's output whole
(torchrun_ranks.py), the dtypes under test, the backend grids' checks, a rank killed on purpose,
and a bench run as a test. Tests import them as `support.NAME` (tests/ is on pytest's path)."""
