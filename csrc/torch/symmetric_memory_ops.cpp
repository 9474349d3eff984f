// The torch.ops.symm_mem kernels pycomm serves for CPU tensors.
//
// Each reads the peers' buffers where they lie (symmetric_memory.h maps them
// at rendezvous) and combines them with the kernels every pycomm all-reduce
// uses (reduce_sources: every rank's value in rank order), so a result is
// bitwise what dist.all_reduce gives on pycomm's one-shot path, and on every
// rank alike. The one-shot and reduce-scatter kernels wait at a barrier of the
// buffer's signal pad before (every rank's input is written) and after (nobody
// writes its buffer while a peer reads it); the two-shot ones are the group's
// own all-reduce, which runs in place on symmetric memory.
//
// Unlike torch's CUDA kernels these take every reduction pycomm takes (sum,
// avg, max, min, product, and the bitwise ones on integers) and every dtype
// with arithmetic, since the kernels are the backend's; torch's CUDA ones take
// sum on float and bfloat16.
//
// The kernels are boxed: the dispatcher checks an unboxed kernel's C++
// signature against the first one registered for the op, and torch's own
// differ between releases (by value or by reference), so a kernel written
// for one release would stop the extension loading on another.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "../core/kernels/reduce_kernels.h"
#include "all_reduce_op.h"
#include "dtype_map.h"
#include "symmetric_memory.h"
#include "tensor_checks.h"

namespace pycomm {
namespace {

// A contiguous tensor in symmetric memory, as the kernels see it on every rank.
struct SymmetricView {
  c10::intrusive_ptr<CpuSymmetricMemory> handle;
  core::DType dtype;
  core::ReduceOp op;
  size_t esize;
  size_t count;   // elements of `dtype` (a complex tensor is pairs of reals)
  size_t offset;  // bytes from the start of every rank's buffer
  int rank;
  int world;

  const char* at(int r, size_t element) const { return handle->buffer(r) + offset + element * esize; }
  // out[0, n) = every rank's [first, first + n), combined in rank order.
  void reduce(void* out, size_t first, size_t n) const {
    if (n == 0) return;
    std::vector<const void*> srcs(world);
    for (int r = 0; r < world; ++r) srcs[r] = at(r, first);
    core::reduce_sources(dtype, op, out, srcs.data(), world, n, world);
  }
};

// Where t starts in its symmetric buffer, in bytes, every element it reaches
// (any strides) checked to lie inside the buffer.
size_t place_in_buffer(const char* name, const at::Tensor& t, const char* arg,
                       CpuSymmetricMemory& handle) {
  const size_t reach = at::detail::computeStorageNbytes(t.sizes(), t.strides(), t.element_size(),
                                                        t.storage_offset());
  TORCH_CHECK_VALUE(reach <= handle.get_buffer_size(), name, ": ", arg,
                    ": reaches past its symmetric buffer's ", handle.get_buffer_size(), " bytes");
  return size_t(t.storage_offset()) * t.element_size();
}

SymmetricView symmetric_view(const char* name, const at::Tensor& t, const char* arg,
                             const std::string& reduce_op, const std::string& group_name) {
  check_tensor(t, arg);
  TORCH_CHECK_VALUE(t.is_contiguous(), name, ": ", arg, ": must be contiguous");
  SymmetricView v;
  TORCH_CHECK_VALUE(to_core_op(reduce_op, &v.op), name, ": reduce_op: unknown reduction '",
                    reduce_op, "'; expected one of ", joined_names(core::kReduceOps, core::op_name));
  check_op_for_dtype(v.op, false, t.scalar_type(), arg);
  v.dtype = dtype_of(t);
  v.esize = core::dtype_size(v.dtype);
  v.count = size_t(t.numel()) * (t.is_complex() ? 2 : 1);
  v.handle = cpu_symmetric_memory(t, group_name, name);
  v.offset = place_in_buffer(name, t, arg, *v.handle);
  v.rank = v.handle->get_rank();
  v.world = v.handle->get_world_size();
  return v;
}

void check_output(const char* name, const at::Tensor& out, const char* arg, const at::Tensor& like) {
  check_like(out, arg, like.scalar_type(), like.numel(), "the input");
  TORCH_CHECK_VALUE(out.is_contiguous(), name, ": ", arg, ": must be contiguous");
  check_writable(out, arg);
}

void one_shot(const SymmetricView& v, at::Tensor& out) {
  v.handle->barrier(0, 0);
  v.reduce(out.data_ptr(), 0, v.count);
  v.handle->barrier(0, 0);
}

// The op's arguments, off the stack, and its result back on.
struct Args {
  torch::jit::Stack* stack;
  size_t n;
  const c10::IValue& operator[](size_t i) const { return (*stack)[stack->size() - n + i]; }
  void result(c10::IValue v) {
    torch::jit::drop(*stack, n);
    torch::jit::push(*stack, std::move(v));
  }
};

Args args_of(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  return Args{stack, op.schema().arguments().size()};
}

// one_shot_all_reduce(Tensor input, str reduce_op, str group_name) -> Tensor
void one_shot_all_reduce(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  Args a = args_of(op, stack);
  const at::Tensor input = a[0].toTensor();
  const SymmetricView v = symmetric_view("one_shot_all_reduce", input, "input", a[1].toStringRef(),
                                         a[2].toStringRef());
  at::Tensor out = at::empty_like(input, at::MemoryFormat::Contiguous);
  one_shot(v, out);
  a.result(out);
}

// one_shot_all_reduce_out(Tensor input, str reduce_op, str group_name, Tensor(a!) out) -> Tensor(a!)
void one_shot_all_reduce_out(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  Args a = args_of(op, stack);
  const at::Tensor input = a[0].toTensor();
  at::Tensor out = a[3].toTensor();
  const SymmetricView v = symmetric_view("one_shot_all_reduce_out", input, "input",
                                         a[1].toStringRef(), a[2].toStringRef());
  check_output("one_shot_all_reduce_out", out, "out", input);
  one_shot(v, out);
  a.result(out);
}

// The copy forms: local_input goes into the front of symm_buffer first.
SymmetricView copied_in(const char* name, const at::Tensor& symm_buffer, const at::Tensor& local_input,
                        const std::string& reduce_op, const std::string& group_name) {
  check_tensor(local_input, "local_input");
  TORCH_CHECK_VALUE(local_input.scalar_type() == symm_buffer.scalar_type(), name,
                    ": local_input: dtype ", local_input.scalar_type(), " is not symm_buffer's ",
                    symm_buffer.scalar_type());
  TORCH_CHECK_VALUE(local_input.numel() <= symm_buffer.numel(), name, ": local_input: ",
                    local_input.numel(), " elements do not fit in symm_buffer's ", symm_buffer.numel());
  TORCH_CHECK_VALUE(symm_buffer.is_contiguous(), name, ": symm_buffer: must be contiguous");
  at::Tensor front = symm_buffer.reshape({-1}).narrow(0, 0, local_input.numel());
  const SymmetricView v = symmetric_view(name, front, "symm_buffer", reduce_op, group_name);
  front.copy_(local_input.reshape({-1}));
  return v;
}

// one_shot_all_reduce_copy(Tensor symm_buffer, Tensor local_input, str reduce_op, str group_name) -> Tensor
void one_shot_all_reduce_copy(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  Args a = args_of(op, stack);
  const at::Tensor local_input = a[1].toTensor();
  const SymmetricView v = copied_in("one_shot_all_reduce_copy", a[0].toTensor(), local_input,
                                    a[2].toStringRef(), a[3].toStringRef());
  at::Tensor out = at::empty_like(local_input, at::MemoryFormat::Contiguous);
  one_shot(v, out);
  a.result(out);
}

// one_shot_all_reduce_copy_out(Tensor symm_buffer, Tensor local_input, str reduce_op, str group_name,
//                              Tensor(a!) out) -> Tensor(a!)
void one_shot_all_reduce_copy_out(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  Args a = args_of(op, stack);
  const at::Tensor local_input = a[1].toTensor();
  at::Tensor out = a[4].toTensor();
  check_output("one_shot_all_reduce_copy_out", out, "out", local_input);
  const SymmetricView v = copied_in("one_shot_all_reduce_copy_out", a[0].toTensor(), local_input,
                                    a[2].toStringRef(), a[3].toStringRef());
  one_shot(v, out);
  a.result(out);
}

// two_shot_all_reduce_(Tensor(a!) input, str reduce_op, str group_name) -> Tensor(a!)
// The group's all-reduce, which reduces a tensor in the group's symmetric
// memory where it lies (each rank its share of every copy, written into every
// copy: host_plan.cpp, core's two_shot): one implementation with dist.all_reduce,
// its mismatch checks and its deadlines.
void two_shot_all_reduce_(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  Args a = args_of(op, stack);
  at::Tensor input = a[0].toTensor();
  const char* name = "two_shot_all_reduce_";
  const SymmetricView v = symmetric_view(name, input, "input", a[1].toStringRef(), a[2].toStringRef());
  all_reduce_on_group(input, v.op, a[2].toStringRef(), name);
  a.result(input);
}

// two_shot_all_reduce_out(Tensor(a!) input, str reduce_op, str group_name, Tensor(b!) output) -> Tensor(b!)
// As above, then a copy into output (input holds the result too; CUDA's
// leaves part of it changed).
void two_shot_all_reduce_out(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  Args a = args_of(op, stack);
  at::Tensor input = a[0].toTensor();
  at::Tensor output = a[3].toTensor();
  const char* name = "two_shot_all_reduce_out";
  const SymmetricView v = symmetric_view(name, input, "input", a[1].toStringRef(), a[2].toStringRef());
  check_output(name, output, "output", input);
  all_reduce_on_group(input, v.op, a[2].toStringRef(), name);
  output.copy_(input);
  a.result(output);
}

// reduce_scatter_out(Tensor(a!) input, str group_name, bool split_last_dim, Tensor(b!) output) -> Tensor(b!)
// The sum of every rank's input; this rank keeps block `rank` of it: of the
// flat tensor, or (split_last_dim) of every row's last dimension.
void reduce_scatter_out(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  Args a = args_of(op, stack);
  const at::Tensor input = a[0].toTensor();
  const bool split_last_dim = a[2].toBool();
  at::Tensor output = a[3].toTensor();
  const char* name = "reduce_scatter_out";
  const SymmetricView v = symmetric_view(name, input, "input", "sum", a[1].toStringRef());
  const int64_t last = input.dim() > 0 ? input.size(-1) * (input.is_complex() ? 2 : 1) : 1;
  const size_t row = split_last_dim ? size_t(last) : v.count;
  TORCH_CHECK_VALUE(row % size_t(v.world) == 0, name, ": input: ",
                    split_last_dim ? "its last dimension" : "its elements", " (", row,
                    ") do not split evenly among ", v.world, " ranks");
  const size_t block = row / size_t(v.world);
  const size_t rows = row ? v.count / row : 0;
  check_tensor(output, "output");
  TORCH_CHECK_VALUE(output.scalar_type() == input.scalar_type() && output.is_contiguous() &&
                        size_t(output.numel()) * (output.is_complex() ? 2 : 1) == rows * block,
                    name, ": output: must be a contiguous ", input.scalar_type(), " tensor of ",
                    rows * block, " elements (the input's share of one rank)");
  check_writable(output, "output");
  char* dst = static_cast<char*>(output.data_ptr());
  v.handle->barrier(0, 0);
  for (size_t i = 0; i < rows; ++i) {
    v.reduce(dst + i * block * v.esize, i * row + size_t(v.rank) * block, block);
  }
  v.handle->barrier(0, 0);
  a.result(output);
}

// get_remote_tensors(Tensor x, str group_name) -> Tensor[]
// Every rank's copy of x, in rank order: views of the buffers rendezvous
// mapped into this process, at x's place with x's shape and strides (torch's
// CUDA kernel gives the start of each buffer; here an offset view gets its
// peers' same view). No synchronization: reading a peer's copy is the
// caller's to order, with barrier or signals. Each view holds the handle,
// which holds the mappings, so a view outlives the buffer's free safely.
void get_remote_tensors(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  Args a = args_of(op, stack);
  const at::Tensor x = a[0].toTensor();
  check_tensor(x, "x");
  auto handle = cpu_symmetric_memory(x, a[1].toStringRef(), "get_remote_tensors");
  const size_t offset = place_in_buffer("get_remote_tensors", x, "x", *handle);
  c10::List<at::Tensor> views;
  for (int r = 0; r < handle->get_world_size(); ++r) {
    views.push_back(at::from_blob(handle->buffer(r) + offset, x.sizes(), x.strides(),
                                  [handle](void*) {}, x.options()));
  }
  a.result(std::move(views));
}

// What pycomm says of a symm_mem op it does not serve on CPU tensors, instead
// of the dispatcher's "Could not run ... with arguments from the 'CPU' backend".
const char* why_refused(const std::string& op) {
  if (op.find("multimem") != std::string::npos || op.find("multicast") != std::string::npos) {
    return "it needs multicast memory (NVLink SHARP), which CPU ranks do not have";
  }
  if (op.rfind("symm_mem::nccl_", 0) == 0) return "it is the NCCL backend's (CUDA tensors)";
  if (op.rfind("symm_mem::nvshmem_", 0) == 0) return "it is NVSHMEM's (CUDA tensors)";
  return "pycomm serves one_shot_all_reduce (and _out, _copy, _copy_out), two_shot_all_reduce_ "
         "(and _out), reduce_scatter_out and get_remote_tensors on CPU tensors, and not this one yet";
}

void refuse(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  const std::string name = op.schema().name();
  C10_THROW_ERROR(NotImplementedError, c10::str(name, ": not served for CPU tensors: ", why_refused(name)));
}

// torch 2.14's symm_mem ops that no CPU kernel serves (torch 2.13 lacks some:
// an impl registered for an op never defined stays unused).
constexpr const char* kRefused[] = {
    "_async_input_mm", "_low_contention_all_gather", "_low_contention_all_gather_ce_multicast",
    "_low_contention_all_gather_ce_multicast_out", "_low_contention_reduce_scatter",
    "all_to_all_vdev", "all_to_all_vdev_2d", "all_to_all_vdev_2d_offset", "fused_all_gather_matmul",
    "fused_all_gather_scaled_matmul", "fused_matmul_reduce_scatter",
    "fused_scaled_matmul_reduce_scatter", "memcpy_to_multicast_", "memset32_",
    "multi_root_tile_reduce", "multimem_all_gather_out", "multimem_all_reduce_",
    "multimem_one_shot_all_reduce", "multimem_one_shot_all_reduce_out",
    "multimem_one_shot_reduce_out", "nccl_all_to_all_nd", "nccl_get", "nccl_get_out", "nccl_put",
    "nccl_put_signal", "nccl_put_with_signal", "nccl_reduce_scatter_offset", "nccl_wait_signal",
    "nccl_wait_for_signal", "nvshmem_all_to_all", "nvshmem_broadcast", "nvshmem_get",
    "nvshmem_get_out", "nvshmem_put", "nvshmem_put_with_signal", "nvshmem_wait_for_signal",
    "stream_write_value32_", "tile_reduce"};

}  // namespace

TORCH_LIBRARY_IMPL(symm_mem, CPU, m) {
  for (const char* name : kRefused) m.impl(name, torch::CppFunction::makeFromBoxedFunction<&refuse>());
  m.impl("one_shot_all_reduce", torch::CppFunction::makeFromBoxedFunction<&one_shot_all_reduce>());
  m.impl("one_shot_all_reduce_out", torch::CppFunction::makeFromBoxedFunction<&one_shot_all_reduce_out>());
  m.impl("one_shot_all_reduce_copy", torch::CppFunction::makeFromBoxedFunction<&one_shot_all_reduce_copy>());
  m.impl("one_shot_all_reduce_copy_out",
         torch::CppFunction::makeFromBoxedFunction<&one_shot_all_reduce_copy_out>());
  m.impl("two_shot_all_reduce_", torch::CppFunction::makeFromBoxedFunction<&two_shot_all_reduce_>());
  m.impl("two_shot_all_reduce_out", torch::CppFunction::makeFromBoxedFunction<&two_shot_all_reduce_out>());
  m.impl("reduce_scatter_out", torch::CppFunction::makeFromBoxedFunction<&reduce_scatter_out>());
  m.impl("get_remote_tensors", torch::CppFunction::makeFromBoxedFunction<&get_remote_tensors>());
}

}  // namespace pycomm
