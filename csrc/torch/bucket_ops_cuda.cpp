// CUDA kernels of pycomm::flatten_into and pycomm::unflatten: the checks of
// bucket_ops.cpp, then one launch of the bucketing kernel (csrc/cuda/
// bucket_kernels.cu) on torch's current stream. Built only with the CUDA
// sources (PYCOMM_WITH_CUDA).
#ifdef PYCOMM_WITH_CUDA
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstring>
#include <vector>

#include "../cuda/bucket_kernels.cuh"
#include "bucket_ops.h"

namespace pycomm::bucket {
namespace {

void launch(core::DType src, core::DType dst, const std::vector<core::BucketSlice>& slices,
            double scale, const at::Device& device) {
  if (slices.empty()) return;
  const auto count = int64_t(slices.size());
  std::vector<cuda::BucketSliceDesc> table(slices.size());
  for (size_t i = 0; i < slices.size(); ++i) {
    table[i] = {slices[i].src, slices[i].dst, int64_t(slices[i].numel), 0};
  }
  const int64_t chunks = cuda::plan_bucket_chunks(table.data(), count);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  if (count <= cuda::kBucketInlineSlices) {
    C10_CUDA_CHECK(pycomm_cuda_convert_slices(src, dst, table.data(), count,
                                              /*table_on_device=*/false, chunks, scale, stream));
    return;
  }
  // A long table goes to the device through pinned memory, on the kernel's
  // stream. Both buffers may be freed when this returns: the host allocator
  // keeps the pinned block until the copy has run (non_blocking records an
  // event), and the device block is reused only by work queued after the
  // kernel on this stream.
  const auto bytes = int64_t(table.size() * sizeof(cuda::BucketSliceDesc));
  at::Tensor host = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  std::memcpy(host.data_ptr(), table.data(), size_t(bytes));
  at::Tensor dev = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(device));
  dev.copy_(host, /*non_blocking=*/true);
  C10_CUDA_CHECK(pycomm_cuda_convert_slices(
      src, dst, static_cast<const cuda::BucketSliceDesc*>(dev.const_data_ptr()), count,
      /*table_on_device=*/true, chunks, scale, stream));
}

void flatten_into_cuda(at::TensorList tensors, const at::Tensor& out, double scale) {
  const int64_t total =
      check_tensor_list("flatten_into", "tensors", tensors, out.device()).expect_int();
  check_bucket("flatten_into", "out", out, total);
  TORCH_CHECK_VALUE(out.is_cuda(), "flatten_into: out must be a CUDA tensor, got ", out.device());
  check_flatten_overlap("flatten_into", tensors, out, total);
  core::DType out_dtype;
  to_bucket_dtype(out.scalar_type(), &out_dtype);
  c10::cuda::CUDAGuard guard(out.device());
  launch(list_dtype(tensors, out_dtype), out_dtype, pack_slices(tensors, out), scale,
         out.device());
}

void unflatten_cuda(const at::Tensor& flat, at::TensorList outs, double scale) {
  const int64_t total = check_tensor_list("unflatten", "tensors", outs, flat.device()).expect_int();
  check_bucket("unflatten", "flat", flat, total);
  TORCH_CHECK_VALUE(flat.is_cuda(), "unflatten: flat must be a CUDA tensor, got ", flat.device());
  check_unflatten_overlap("unflatten", flat, outs, total);
  core::DType flat_dtype;
  to_bucket_dtype(flat.scalar_type(), &flat_dtype);
  c10::cuda::CUDAGuard guard(flat.device());
  launch(flat_dtype, list_dtype(outs, flat_dtype), unpack_slices(flat, outs), scale,
         flat.device());
}

}  // namespace

// The schemas, the CPU and Meta kernels are in bucket_ops.cpp.
TORCH_LIBRARY_IMPL(pycomm, CUDA, m) {
  m.impl("flatten_into", &flatten_into_cuda);
  m.impl("unflatten", &unflatten_cuda);
}

}  // namespace pycomm::bucket
#endif  // PYCOMM_WITH_CUDA
