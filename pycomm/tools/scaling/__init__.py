"""The scaling model: what synchronous data-parallel training costs on N GPUs, and why.

The hierarchical all-reduce follows the backend's own routing table (pycomm.routing, read from
pycomm._C); the rest is the standard library and pycomm.tools.results_schema.

    links      the interconnect catalogue (alpha and B of NVLink, PCIe, InfiniBand, Ethernet;
               a CPU host's shared memory and gloo's TCP, fitted to bench/results)
    model      the formulas (ring, buckets, hierarchy, overlap, epochs) and predict()
    calibrate  alpha and B fitted to the bench's JSON rows; a measured step against the model
    presets    published ResNet-50 runs reproduced, with notes deriving each figure
    three_d    data x tensor x pipeline parallel: each dimension's bytes, the bubble, the step
    cores      a CPU host's cores, sockets and socket link under the shared-memory ring, with
               a rank's thread team (python3 -m pycomm.tools.scaling.cores)

    from pycomm.tools import scaling
    nvlink, ib = scaling.get_interconnect("nvlink"), scaling.get_interconnect("ib")
    scaling.predict(scaling.RESNET50, scaling.Cluster(32, 8, nvlink, ib)).efficiency
    scaling.get_preset("resnet50-4xa100").notes   # or PRESETS: published runs, explained
    layout = scaling.Layout3D(dp=8, tp=8, pp=4, microbatches=16)
    links = scaling.Links3D.on_hosts(layout, 8, nvlink, ib)
    scaling.predict_3d(layout, scaling.TransformerShape(48, 8192, 2048, 1, 2), links).step_s
"""
from .calibrate import (Calibration, Comparison, calibrate, calibrate_hierarchical,
                        compare_with_measurement, fit_alpha_beta)
from .links import INTERCONNECTS, Interconnect, get_interconnect
from .model import (DDP_BUCKET_CAP, DEFAULT_OVERLAP, GB, MB, MIB, Cluster, Prediction, Sync,
                    Workload, bucketed_allreduce_time, epoch_seconds, flat_ring_allreduce_time,
                    hierarchical_allreduce_time, hierarchy_table, predict, ring_allreduce_time,
                    split_buckets, steps_per_epoch)
from .presets import PRESETS, RESNET50, RESNET50_PARAMS, Scenario, get_preset
from .three_d import Layout3D, Links3D, Prediction3D, TransformerShape, predict_3d

__all__ = [
    "DDP_BUCKET_CAP", "DEFAULT_OVERLAP", "GB", "INTERCONNECTS", "MB", "MIB", "PRESETS",
    "RESNET50", "RESNET50_PARAMS",
    "Calibration", "Cluster", "Comparison", "Interconnect", "Layout3D", "Links3D", "Prediction",
    "Prediction3D", "Scenario", "Sync", "TransformerShape", "Workload",
    "bucketed_allreduce_time", "calibrate", "calibrate_hierarchical", "compare_with_measurement",
    "epoch_seconds", "fit_alpha_beta", "flat_ring_allreduce_time", "get_interconnect",
    "get_preset", "hierarchical_allreduce_time", "hierarchy_table", "predict", "predict_3d",
    "ring_allreduce_time", "split_buckets", "steps_per_epoch",
]
