#include "bucket_kernels.cuh"

namespace pycomm::cuda {
namespace {

// Enough blocks to fill any current GPU many times over; a grid-stride loop
// covers the rest of a larger bucket.
constexpr int64_t kMaxBlocks = int64_t(1) << 20;

template <class S, class D>
cudaError_t launch_typed(const BucketLaunch& p, bool scaled, cudaStream_t stream) {
  const int64_t blocks = p.total_chunks < kMaxBlocks ? p.total_chunks : kMaxBlocks;
  if (scaled) {
    bucket_convert_slices<S, D, true><<<unsigned(blocks), kBucketThreads, 0, stream>>>(p);
  } else {
    bucket_convert_slices<S, D, false><<<unsigned(blocks), kBucketThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

// The single place where the two dtypes become template arguments.
template <class S>
cudaError_t launch_dst(core::DType dst, const BucketLaunch& p, bool scaled, cudaStream_t stream) {
  switch (dst) {
    case core::DType::kFloat32: return launch_typed<S, float>(p, scaled, stream);
    case core::DType::kFloat64: return launch_typed<S, double>(p, scaled, stream);
    case core::DType::kFloat16: return launch_typed<S, __half>(p, scaled, stream);
    case core::DType::kBFloat16: return launch_typed<S, __nv_bfloat16>(p, scaled, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace
}  // namespace pycomm::cuda

extern "C" cudaError_t pycomm_cuda_convert_slices(pycomm::core::DType src_dtype,
                                                  pycomm::core::DType dst_dtype,
                                                  const pycomm::cuda::BucketSliceDesc* slices,
                                                  int64_t count, bool table_on_device,
                                                  int64_t total_chunks, double scale,
                                                  cudaStream_t stream) {
  using namespace pycomm::cuda;
  using pycomm::core::DType;
  if (count < 0 || (!table_on_device && count > kBucketInlineSlices)) return cudaErrorInvalidValue;
  if (count == 0 || total_chunks == 0) return cudaSuccess;
  BucketLaunch p{};
  p.count = count;
  p.total_chunks = total_chunks;
  p.scale = scale;
  if (table_on_device) {
    p.table = slices;
  } else {
    p.table = nullptr;
    for (int64_t i = 0; i < count; ++i) p.inline_table[i] = slices[i];
  }
  // Scale 1 is an exact copy or cast: the kernel without the multiply.
  const bool scaled = scale != 1.0;
  switch (src_dtype) {
    case DType::kFloat32: return launch_dst<float>(dst_dtype, p, scaled, stream);
    case DType::kFloat64: return launch_dst<double>(dst_dtype, p, scaled, stream);
    case DType::kFloat16: return launch_dst<__half>(dst_dtype, p, scaled, stream);
    case DType::kBFloat16: return launch_dst<__nv_bfloat16>(dst_dtype, p, scaled, stream);
    default: return cudaErrorInvalidValue;
  }
}
