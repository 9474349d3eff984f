"""The interconnect catalogue: each kind of link as a ring all-reduce sees it, an alpha and a B:
GPU links from datasheets, CPU links (shared memory, gloo's TCP) fitted to bench/results."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Interconnect:
    """One kind of link as a ring all-reduce sees it.

    alpha_s: the cost of one ring step independent of its size (launch, handshake, wire
    latency). bandwidth_Bps: bytes per second in one direction, since a ring rank sends to
    one neighbour while it receives from the other.
    """
    name: str
    alpha_s: float
    bandwidth_Bps: float
    source: str = ""

    def __post_init__(self):
        if not self.alpha_s >= 0:
            raise ValueError(f"{self.name}: alpha_s must be >= 0, got {self.alpha_s!r}")
        if not self.bandwidth_Bps > 0:
            raise ValueError(f"{self.name}: bandwidth_Bps must be > 0, got {self.bandwidth_Bps!r}")


# Bandwidths are datasheet line rates per direction. The alphas are order-of-magnitude
# estimates of one ring step (no datasheet gives them): calibrate from
# `pycomm bench allreduce --json` (pycomm predict --calibrate) for a machine you have.
INTERCONNECTS: dict = {
    link.name: link for link in (
        Interconnect("nvlink3", 2e-6, 300e9,
                     "A100 SXM4: 12 NVLink3 links x 25 GB/s = 300 GB/s per direction "
                     "(600 GB/s total), NVIDIA A100 datasheet"),
        Interconnect("nvlink4", 2e-6, 450e9,
                     "H100 SXM5: 18 NVLink4 links x 25 GB/s = 450 GB/s per direction "
                     "(900 GB/s total), NVIDIA H100 datasheet"),
        Interconnect("pcie4", 5e-6, 31.5e9,
                     "PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 / 8 = 31.5 GB/s per direction"),
        Interconnect("pcie3", 5e-6, 15.75e9,
                     "PCIe 3.0 x16: 8 GT/s x 16 lanes x 128/130 / 8 = 15.75 GB/s per direction"),
        Interconnect("ib-hdr", 5e-6, 25e9,
                     "InfiniBand HDR: 200 Gb/s = 25 GB/s per direction, one NIC on the ring"),
        Interconnect("ib-ndr", 5e-6, 50e9,
                     "InfiniBand NDR: 400 Gb/s = 50 GB/s per direction, one NIC on the ring"),
        Interconnect("eth-10g", 50e-6, 1.25e9,
                     "10 GbE: 10 Gb/s = 1.25 GB/s per direction; alpha: TCP through two kernels"),
        Interconnect("eth-100g", 25e-6, 12.5e9,
                     "100 GbE: 100 Gb/s = 12.5 GB/s per direction"),
    )
}

# CPU ranks, as pycomm runs them: shared memory inside a host, gloo's TCP between hosts.
# Each figure is what pycomm.tools.scaling.calibrate (the fit `pycomm predict --calibrate`
# runs) gives for the all-reduce rows committed in bench/results, measured on the 2-core CI
# host on 2026-12-05 (the between-hosts one on 2026-12-02); tests/test_scaling_calibration.py fits them
# again from those files. The rows are 2 ranks on 2 cores, so a host with a core per rank
# and less load does better.
CPU_RESULTS = "bench/results/collectives_2ranks.json"
HOSTS_RESULTS = "bench/results/collectives_4ranks_2hosts.json"
# alpha_s, bandwidth_Bps
SHM_FIT = (0.666e-6, 6.97e9)            # CPU_RESULTS, pycomm's column (the direct API)
GLOO_LOOPBACK_FIT = (113e-6, 1.20e9)    # CPU_RESULTS, gloo's column (stock_us)
GLOO_BETWEEN_HOSTS_FIT = (273e-6, 1.24e9)  # HOSTS_RESULTS, leaders_host_us: gloo between
#                                          the two fake hosts' first ranks, the whole message

for _wire, _line, _what in (("eth-10g", 1.25e9, "10 GbE, 10 Gb/s = 1.25 GB/s"),
                            ("eth-25g", 3.125e9, "25 GbE, 25 Gb/s = 3.125 GB/s"),
                            ("eth-100g", 12.5e9, "100 GbE, 100 Gb/s = 12.5 GB/s"),
                            ("ib-hdr", 25e9, "InfiniBand HDR as IP over IB (gloo speaks TCP), "
                                             "200 Gb/s = 25 GB/s")):
    INTERCONNECTS[f"gloo-{_wire}"] = Interconnect(
        f"gloo-{_wire}", GLOO_BETWEEN_HOSTS_FIT[0], min(_line, GLOO_BETWEEN_HOSTS_FIT[1]),
        f"CPU hosts over {_what} per direction, through gloo's TCP (pycomm's link between "
        f"hosts): alpha {GLOO_BETWEEN_HOSTS_FIT[0] * 1e6:.0f} us, gloo's step fitted to "
        f"{HOSTS_RESULTS} (leaders column: the kernel's TCP on both ends and gloo's own "
        f"exchanges; the wire's few us are within that fit's spread); bandwidth the lesser of "
        f"the line rate and the {GLOO_BETWEEN_HOSTS_FIT[1] / 1e9:.2f} GB/s gloo's TCP moved "
        f"there, so above 10 GbE the CPU's stack, not the wire, bounds one stream (pycomm's "
        f"hierarchical all-reduce runs one stream per local rank: --nics-per-host N lets N of "
        f"them run at that rate at once)")
INTERCONNECTS["shm"] = Interconnect(
    "shm", *SHM_FIT,
    f"pycomm's shared memory between the CPU ranks of one host: alpha and B fitted to the "
    f"all-reduce rows of {CPU_RESULTS} (pycomm's column: the direct API, 8 B to 128 MiB)")
INTERCONNECTS["gloo-loopback"] = Interconnect(
    "gloo-loopback", *GLOO_LOOPBACK_FIT,
    f"gloo between the CPU ranks of one host (TCP through the kernel's loopback): alpha and B "
    f"fitted to the all-reduce rows of {CPU_RESULTS} (gloo's column)")
del _wire, _line, _what

# The names people type for a link family, mapped to the member they most likely mean.
_ALIASES = {
    "nvlink": "nvlink3", "pcie": "pcie4", "ib": "ib-hdr", "infiniband": "ib-hdr",
    "hdr": "ib-hdr", "ndr": "ib-ndr", "10gbe": "eth-10g", "ethernet": "eth-10g",
    "eth": "eth-10g", "100gbe": "eth-100g",
    "shared-memory": "shm", "loopback": "gloo-loopback", "gloo-eth": "gloo-eth-10g",
    "gloo-ib": "gloo-ib-hdr", "gloo-ethernet": "gloo-eth-10g",
}


def get_interconnect(name: str) -> Interconnect:
    """The catalogue's link called ``name``, or one of its aliases (nvlink, pcie, ib, 10gbe...)."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    try:
        return INTERCONNECTS[key]
    except KeyError:
        known = sorted(set(INTERCONNECTS) | set(_ALIASES))
        raise ValueError(f"interconnect: unknown {name!r}; known: {', '.join(known)}") from None
