"""pycomm's analysis tools, kept apart from the runtime: the scaling model (``scaling``: what
synchronous data-parallel training costs on N GPUs, an alpha-beta ring with presets for published
runs), the doctor (``doctor``: the environment as it matters for distributed training, and the
common mistakes in a training script), and the ``pycomm`` command (``cli``) that drives both and
runs the benchmarks. The layering runs one way: these tools may use the runtime, and the runtime
(``pycomm/__init__.py``, ``comm``, ``hooks``, ``bucketing``, ``bucket_ops``) never imports them.
"""
