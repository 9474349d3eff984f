"""The host's NUMA nodes and sockets (pycomm.host_cpus): read from sysfs, posed by
PYCOMM_TOPOLOGY, and what `pycomm doctor` says of them."""
import os

import pytest

from pycomm import host_cpus

pytestmark = pytest.mark.fast


def _fake_sys(tmp_path, nodes, packages):
    """A sysfs tree with `nodes` {node: cpulist} and `packages` {cpu: socket}."""
    for n, cpus in nodes.items():
        d = tmp_path / "node" / f"node{n}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
    for cpu, package in packages.items():
        d = tmp_path / "cpu" / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{package}\n")
    return str(tmp_path)


def test_cpulists_parse_as_the_kernel_writes_them():
    assert host_cpus.parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert host_cpus.parse_cpulist("") == []
    with pytest.raises(ValueError):
        host_cpus.parse_cpulist("3-1")


def test_two_sockets_with_two_nodes_each_are_read_from_sysfs(tmp_path, monkeypatch):
    monkeypatch.delenv("PYCOMM_TOPOLOGY", raising=False)
    root = _fake_sys(tmp_path, {0: "0-3", 1: "4-7", 2: "8-11", 3: "12-15", 4: ""},
                     {0: 0, 4: 0, 8: 1, 12: 1})
    layout = host_cpus.numa_layout(root)
    assert sorted(layout.nodes) == [0, 1, 2, 3]  # node 4 is memory alone: no rank runs there
    assert layout.sockets == {0: 0, 1: 0, 2: 1, 3: 1}
    assert layout.nodes_of([3, 4, 5]) == [0, 1]
    assert layout.describe().startswith("4 node(s) on 2 socket(s), from /sys/devices/system/node")
    assert "node 2 (socket 1): CPUs 8-11" in layout.describe()


def test_no_sysfs_means_one_node_of_every_cpu(tmp_path, monkeypatch):
    monkeypatch.delenv("PYCOMM_TOPOLOGY", raising=False)
    layout = host_cpus.numa_layout(str(tmp_path / "absent"))
    assert list(layout.nodes) == [0] and len(layout.nodes[0]) == os.cpu_count()
    assert layout.source == "none"


def test_pycomm_topology_poses_a_layout_and_refuses_a_bad_one(monkeypatch):
    monkeypatch.setenv("PYCOMM_TOPOLOGY", "0;1")
    layout = host_cpus.numa_layout()
    assert layout.nodes == {0: (0,), 1: (1,)} and layout.source == "PYCOMM_TOPOLOGY"
    assert host_cpus.placement()["nodes"] == [n for n in (0, 1) if n in os.sched_getaffinity(0)]
    for bad in ("0-1;1", "0;;1", "a-b"):
        monkeypatch.setenv("PYCOMM_TOPOLOGY", bad)
        with pytest.raises(ValueError, match="PYCOMM_TOPOLOGY"):
            host_cpus.numa_layout()


def test_a_rank_places_its_slots_on_its_node():
    from pycomm import _C, config

    if _C.memfd_unavailable_reason():
        pytest.skip(_C.memfd_unavailable_reason())
    c = _C.Communicator(0, 1, f"memfd:{_C.new_group_id()}", True,
                        config.communicator_config(1, 5.0))
    try:
        p = c.numa_placement
    finally:
        c.unlink_name()
        c.close()
    if p["why_not"]:
        pytest.skip(f"no placement here: {p['why_not']}")
    assert p["node"] >= 0
    # One rank: its two slots (256 KiB each by default), less the partial pages at the edges.
    assert p["pages"] >= 2 * 256 * 1024 // 4096 - 2
    assert p["on_node"] == p["pages"], p


def test_doctor_reports_the_layout_and_a_bad_one_by_name(monkeypatch):
    from pycomm.tools import doctor

    monkeypatch.setenv("PYCOMM_TOPOLOGY", "0;1")
    text = doctor.format_environment(doctor.environment())
    assert "2 node(s) on 2 socket(s), from PYCOMM_TOPOLOGY" in text
    assert "thread team" in text
    pinned = host_cpus.pinned_node()
    assert pinned == (-1 if len(os.sched_getaffinity(0) & {0, 1}) == 2 else min(os.sched_getaffinity(0)))
    assert ("not pinned to one node" in text) == (pinned == -1), text
    monkeypatch.setenv("PYCOMM_TOPOLOGY", "0-1;1")
    info = doctor.environment()
    assert "PYCOMM_TOPOLOGY" in info["numa"]["error"]
    assert any("PYCOMM_TOPOLOGY" in w for w in info["warnings"])
