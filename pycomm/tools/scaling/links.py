"""The interconnect catalogue: each kind of link as a ring all-reduce sees it, an alpha and a B."""
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

# The names people type for a link family, mapped to the member they most likely mean.
_ALIASES = {
    "nvlink": "nvlink3", "pcie": "pcie4", "ib": "ib-hdr", "infiniband": "ib-hdr",
    "hdr": "ib-hdr", "ndr": "ib-ndr", "10gbe": "eth-10g", "ethernet": "eth-10g",
    "eth": "eth-10g", "100gbe": "eth-100g",
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
