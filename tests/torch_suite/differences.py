"""The tests of PyTorch's distributed suite whose outcome on pycomm is not
gloo's, each with the reason, reviewed, and the failure it shows.

A test may be listed only where the difference is torch's (a backend's name,
a gate in torch's own Python), never to hide a pycomm bug; a test gloo fails in
the same run is not held against pycomm and needs no entry.
tests/test_torch_suite.py holds the list to its word: a listed test must still
fail on pycomm, with the failure written here (else the entry is stale and must
go), and every other test must end on pycomm as it ends on gloo.
"""
from typing import NamedTuple


class Difference(NamedTuple):
    why: str
    failure: str  # a regex the failure's text matches
    before: tuple = ()  # (major, minor): only on torch releases older than this one


DIFFERENCES = {
    "test_get_backend": Difference(
        why="the test compares dist.get_backend() with the name the suite was imported with, "
            "'gloo' (the runner gives the suite that name, so that its gates open as for gloo; "
            "tests/torch_suite/rank.py); pycomm's group rightly says 'cpu:pycomm'",
        failure=r"'cpu:pycomm' != 'gloo'"),
    "test_ddp_logging_data_cpu": Difference(
        why="DDP's logging data takes the backend's name from the ProcessGroup torch made "
            "(ProcessGroup::getBackendName, the name of its BackendType), and a backend "
            "registered from outside torch has the type CUSTOM, so torch writes 'custom' "
            "('undefined' before 2.14); pycomm's own Backend::getBackendName() says 'pycomm', "
            "dist.get_backend() says 'cpu:pycomm'. Only torch can change this",
        failure=r"'(custom|undefined)' != 'cpu:pycomm'"),
    "test_monitored_barrier_gloo": Difference(
        why="before 2.14, torch's dist.monitored_barrier refuses in Python any group whose "
            "backend is not named 'gloo' (ValueError), so the call never reaches pycomm; from "
            "2.14 it does, and pycomm hands it to its gloo backend, and the test passes",
        failure=r"monitored_barrier is only implemented for GLOO backend",
        before=(2, 14)),
    "test_monitored_barrier_gloo_subgroup": Difference(
        why="as test_monitored_barrier_gloo",
        failure=r"monitored_barrier is only implemented for GLOO backend",
        before=(2, 14)),
}


def differences_for(torch_version: str) -> dict:
    """The entries that apply to this torch release ("2.13.0+cpu", ...)."""
    release = tuple(int(x) for x in torch_version.split("+")[0].split(".")[:2])
    return {t: d for t, d in DIFFERENCES.items() if not d.before or release < d.before}
