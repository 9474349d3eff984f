"""The tests of PyTorch's distributed suite whose outcome on pycomm is not
gloo's, each with the reason, reviewed, and the failure it shows.

A test may be listed only where gloo fails it too, or where the difference is
torch's (a backend's name), never to hide a pycomm bug. tests/test_torch_suite.py
holds the list to its word: a listed test must still fail on pycomm, with the
failure written here (else the entry is stale and must go), and every test not
listed must end on pycomm as it ends on gloo.
"""
from typing import NamedTuple


class Difference(NamedTuple):
    why: str
    failure: str  # a regex the failure's text matches


DIFFERENCES = {
    "test_get_backend": Difference(
        why="the test compares dist.get_backend() with the name the suite was imported with, "
            "'gloo' (the runner gives the suite that name, so that its gates open as for gloo; "
            "tests/torch_suite/rank.py); pycomm's group rightly says 'cpu:pycomm'",
        failure=r"'cpu:pycomm' != 'gloo'"),
    "test_ddp_logging_data_cpu": Difference(
        why="DDP's logging data takes the backend's name from the ProcessGroup torch made "
            "(ProcessGroup::getBackendName, the name of its BackendType), and a backend "
            "registered from outside torch has the type CUSTOM, so torch writes 'custom'; "
            "pycomm's own Backend::getBackendName() says 'pycomm', dist.get_backend() says "
            "'cpu:pycomm'. Only torch can change this",
        failure=r"'custom' != 'cpu:pycomm'"),
}
