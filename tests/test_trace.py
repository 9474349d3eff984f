"""pycomm.tools.trace (the job trace every communicator writes while it is on) and the
names of pycomm's threads, which the DDP bench reads to split a step into parts."""
import time

import pytest
import torch
import torch.distributed as dist

from support.process_world import thread_names, validating_on_gloo

pytestmark = pytest.mark.ranks


def _direct_api_jobs():
    import pycomm
    from pycomm.tools import trace

    t = torch.ones(1000)
    dist.barrier()
    trace.stop()
    pycomm.all_reduce(t)                      # off: leaves nothing
    trace.start()
    before = time.perf_counter()
    pycomm.all_reduce(t)                      # idle communicator: inline, in this thread
    work = pycomm.all_reduce(torch.ones(3, 5), async_op=True)  # the worker's
    # A wait that finds the job still queued runs it itself (run_if_next): give the
    # worker the time to take it, so that its completion goes through the lane.
    time.sleep(0.05)
    work.wait()
    time.sleep(0.05)                          # the completion lane records after completing
    after = time.perf_counter()
    jobs = trace.take()
    again = trace.take()
    trace.stop()
    return ([tuple(j) for j in jobs], len(again), before, after, thread_names())


def test_direct_api_jobs_are_traced_in_order(worlds):
    for jobs, again, before, after, names in worlds(2).run(_direct_api_jobs):
        assert again == 0, "take() empties the trace"
        # The direct API enters the backend's all-reduce entry: its jobs are named as dist.all_reduce's.
        assert [(j[0], j[1], j[2]) for j in jobs] == [("allreduce", 4000, False),
                                                       ("allreduce", 60, True)], jobs
        for what, nbytes, queued, q, s, e, c in jobs:
            assert before <= q <= s <= e <= c <= after, (q, s, e, c, before, after)
        assert "pycomm-worker" in names and "pycomm-lane" in names, names


def _backend_jobs():
    from pycomm.tools import trace

    t = torch.ones(64)
    trace.start()
    dist.all_reduce(t, async_op=True).wait()
    dist.broadcast(t, 0)
    dist.barrier()
    time.sleep(0.05)
    jobs = [(j.what, j.bytes, j.queued, j.waited_s >= 0, j.ran_s >= 0) for j in trace.take()]
    trace.stop()
    return jobs


@pytest.mark.skipif(validating_on_gloo(), reason="gloo writes no pycomm trace")
def test_backend_jobs_carry_their_collective_names(backend_worlds):
    for jobs in backend_worlds(2).run(_backend_jobs):
        assert [j[:2] for j in jobs] == [("allreduce", 256), ("broadcast", 256), ("barrier", 0)], jobs
        assert jobs[0][2] is True  # async_op: through the worker
        assert all(j[3] and j[4] for j in jobs)


@pytest.mark.fast
def test_step_parts_from_marks_and_jobs():
    from harness.step_parts import step_parts, union_length
    from pycomm.tools.trace import Job

    assert union_length([(0, 2), (1, 3), (5, 6)]) == 4
    jobs = [Job("allreduce", 8, True, 1.0, 1.5, 2.0, 2.25),
            Job("allreduce", 8, True, 3.0, 3.25, 4.0, 4.5)]
    # No hook: the jobs give the hand-overs.
    p = step_parts(0.0, 0.5, 4.75, 5.0, jobs=jobs)
    assert p == dict(forward=0.5, backward=4.25, optimizer=0.25, buckets=2, finalize=1.75,
                     in_flight=2.75, queue=0.75, run=1.25, complete=0.75)
    # A hook's marks take precedence for the hand-overs and the time in flight.
    p = step_parts(0.0, 0.5, 4.75, 5.0, handovers=[(1.0, 2.0), (4.0, None)], jobs=jobs)
    assert p["buckets"] == 2 and p["finalize"] == 0.75 and p["in_flight"] == 1.0
    # No bucket at all.
    p = step_parts(0.0, 1.0, 2.0, 3.0)
    assert p["buckets"] == 0 and p["finalize"] is None and p["queue"] is None


@pytest.mark.fast
def test_thread_cpu_counts_this_thread_as_main():
    from harness import thread_cpu

    before = thread_cpu.snapshot()
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    spent = thread_cpu.since(before)
    assert 0.03 <= spent["main"] <= 1.0, spent
    assert thread_cpu.group_of("pycomm-worker", 7, 1) == "pycomm-worker"
    assert thread_cpu.group_of("gloo", 7, 1) == "other"
    assert thread_cpu.group_of("python", 1, 1) == "main"
