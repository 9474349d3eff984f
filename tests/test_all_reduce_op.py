"""torch.ops.pycomm.all_reduce_(tensor, op, group_name): the per-call op a model calls
(issue 33). Its values against dist.all_reduce on gloo, its errors, its schema (opcheck),
and torch.compile: the op, and a DTensor tensor-parallel model, captured whole into an
Inductor graph on pycomm as on gloo, with the collectives inside and the same values."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import pycomm  # noqa: F401 - registers the op
from support.process_world import reference_group

pytestmark = pytest.mark.ranks

WORLD = 2


def op_values_case():
    """Every op name on integer-valued floats and ints, on the default (pycomm) group and on
    the gloo group: the results must equal dist.all_reduce on gloo, bitwise."""
    rank = dist.get_rank()
    gloo = reference_group()
    ops = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX,
           "min": dist.ReduceOp.MIN, "product": dist.ReduceOp.PRODUCT}
    bad = []
    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.float64):
        for name, red in ops.items():
            if name == "avg" and not dtype.is_floating_point:
                continue
            for n in (1, 7, 1023, 70000):
                base = (torch.arange(n) % 5 + rank + 1).to(dtype)
                want = base.clone()
                dist.all_reduce(want, op=red, group=gloo)
                for group in (dist.group.WORLD, gloo):
                    got = base.clone()
                    assert torch.ops.pycomm.all_reduce_(got, name, group.group_name) is None
                    if not torch.equal(got, want):
                        bad.append((str(dtype), name, n, dist.get_backend(group)))
    return bad


def test_op_equals_gloo_for_every_op(backend_worlds):
    for bad in backend_worlds(WORLD).run(op_values_case):
        assert bad == []


def op_errors_case():
    t = torch.ones(4)
    errors = {}
    for label, call in (("op", lambda: torch.ops.pycomm.all_reduce_(t, "mean", dist.group.WORLD.group_name)),
                        ("group_name", lambda: torch.ops.pycomm.all_reduce_(t, "sum", "no-such-group"))):
        try:
            call()
            errors[label] = None
        except Exception as e:  # noqa: BLE001 - reported to the test
            errors[label] = (type(e).__name__, str(e))
    # Nothing was changed, and the group still works.
    torch.ops.pycomm.all_reduce_(t, "sum", dist.group.WORLD.group_name)
    return errors, t.tolist()


def test_op_errors_name_the_argument(backend_worlds):
    for errors, after in backend_worlds(WORLD).run(op_errors_case):
        kind, msg = errors["op"]
        assert kind == "ValueError" and "op: unknown reduction 'mean'" in msg, msg
        kind, msg = errors["group_name"]
        assert kind == "ValueError" and "group_name: no process group is registered as 'no-such-group'" in msg
        assert after == [2.0] * 4


def opcheck_case():
    # opcheck runs the op several times (schema, fake tensor, autograd registration):
    # each a real all-reduce, the same sequence on every rank.
    t = torch.ones(6)
    torch.library.opcheck(torch.ops.pycomm.all_reduce_.default, (t, "max", dist.group.WORLD.group_name),
                          test_utils=("test_schema", "test_faketensor"))
    return True


def test_opcheck(backend_worlds):
    assert backend_worlds(WORLD).run(opcheck_case) == [True] * WORLD


def capture_inductor():
    """A torch.compile backend that keeps each graph Dynamo hands over and what Inductor
    runs after its passes (the post-grad graph: DTensor's collectives show there), then
    compiles it with Inductor. Returns (backend, graphs, post_grad calls)."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.custom_graph_pass import CustomGraphPass

    graphs, calls = [], set()

    class Record(CustomGraphPass):
        def __call__(self, graph):
            calls.update(str(n.target) for n in graph.nodes if n.op == "call_function")

        def uuid(self):
            return None  # not cacheable: Inductor compiles afresh and runs the pass

    def backend(gm, example_inputs):
        graphs.append(gm)
        with config.patch(post_grad_custom_post_pass=Record(), fx_graph_cache=False):
            return compile_fx(gm, example_inputs)

    return backend, graphs, calls


def targets(graphs) -> set:
    return {str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"}


def compiled_op_case():
    torch._dynamo.reset()
    name = dist.group.WORLD.group_name
    rank = dist.get_rank()

    def step(x, w):
        h = torch.relu(x @ w)
        torch.ops.pycomm.all_reduce_(h, "sum", name)
        return h * 2 + 1

    backend, graphs, _ = capture_inductor()
    compiled = torch.compile(step, backend=backend, fullgraph=True)
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4) % 3 + rank
    w = torch.ones(4, 5)
    return compiled(x, w), step(x.clone(), w), len(graphs), sorted(targets(graphs))


def test_compiled_op_stays_in_one_graph(backend_worlds):
    results = backend_worlds(WORLD).run(compiled_op_case)
    for got, eager, ngraphs, calls in results:
        assert ngraphs == 1
        assert any(c.startswith("pycomm.all_reduce_") for c in calls), calls
        assert torch.equal(got, eager)
    assert torch.equal(results[0][0], results[1][0])


def compiled_tp_case():
    """A tensor-parallel MLP block (column- then row-wise linear, as Llama's MLP is split)
    compiled with Inductor on a pycomm mesh and on a gloo mesh of the same ranks."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch._dynamo.reset()
    out = {}
    for label, group in (("pycomm", dist.group.WORLD), ("gloo", reference_group())):
        mesh = DeviceMesh.from_group(group, "cpu")
        torch.manual_seed(0)
        block = torch.nn.Sequential(torch.nn.Linear(16, 32, bias=False), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 16, bias=False))
        with torch.no_grad():  # integer-valued weights and inputs: exact sums
            for p in block.parameters():
                p.copy_(torch.randint(-2, 3, p.shape).float())
        parallelize_module(block, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        backend, graphs, post_grad = capture_inductor()
        compiled = torch.compile(block, backend=backend, fullgraph=True)
        x = torch.randint(-3, 4, (4, 16)).float()
        with torch.no_grad():
            got = compiled(x) * 1  # waits for an async collective's result
            eager = block(x) * 1
        out[label] = (got, eager, len(graphs), sorted(post_grad))
    return out


def test_compiled_tensor_parallel_model_as_on_gloo(backend_worlds):
    results = backend_worlds(WORLD).run(compiled_tp_case)
    for out in results:
        got, eager, ngraphs, calls = out["pycomm"]
        ref, _, ref_graphs, ref_calls = out["gloo"]
        assert ngraphs == ref_graphs == 1
        # The row-wise layer's all-reduce, inside the graph, as on gloo.
        assert any("all_reduce" in c for c in calls), calls
        assert calls == ref_calls
        assert torch.equal(got, eager) and torch.equal(got, ref)
    assert torch.equal(results[0]["pycomm"][0], results[1]["pycomm"][0])


@pytest.mark.fast
@pytest.mark.parametrize("size", [0, 3])
def test_meta_kernel_keeps_the_tensor(size):
    t = torch.empty(size, 2, device="meta")
    torch.ops.pycomm.all_reduce_(t, "sum", "any")
    assert t.shape == (size, 2) and t.device.type == "meta"
