#include "staged_tensor.h"

#include <optional>

#include "dtype_map.h"

namespace pycomm {
namespace {

// An integer type of `size` bytes: copy_ between two tensors of it moves the
// bits. (torch's copy_ of bool writes 0 or 1 whatever the byte held, and has
// no kernel for the sub-byte and bits dtypes.) None for 16-byte complex128,
// whose own copy moves its bits.
std::optional<at::ScalarType> carrier_of(size_t size) {
  switch (size) {
    case 1: return at::kByte;
    case 2: return at::kShort;
    case 4: return at::kInt;
    case 8: return at::kLong;
    default: return std::nullopt;
  }
}

bool needs_values(const at::Tensor& t) { return t.is_conj() || t.is_neg(); }

}  // namespace

void copy_bits(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.numel() == 0) return;
  const auto carrier = carrier_of(size_t(src.element_size()));
  if (needs_values(dst) || needs_values(src) || !carrier) {
    dst.copy_(src);
    return;
  }
  dst.view(*carrier).copy_(src.view(*carrier));
}

StagedTensor::StagedTensor(const at::Tensor& t, Use use) : user_(t), use_(use) {
  staged_ = needed(t);
  buffer_ = staged_ ? at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous))
                    : t;
  flat_ = real_view(buffer_);
}

at::Tensor clone_bits(const at::Tensor& t) {
  at::Tensor out = at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
  copy_bits(out, t);
  return out;
}

void StagedTensor::copy_in() const {
  if (staged_ && (use_ & kIn)) copy_bits(buffer_, user_);
}

void StagedTensor::copy_out() const {
  if (staged_ && (use_ & kOut)) copy_bits(user_, buffer_);
}

std::vector<StagedTensor> staged_each(const std::vector<at::Tensor>& ts, StagedTensor::Use use) {
  std::vector<StagedTensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.emplace_back(t, use);
  return out;
}

std::vector<at::Tensor> flats_of(const std::vector<StagedTensor>& ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(t.flat());
  return out;
}

void copy_in(const std::vector<StagedTensor>& ts) {
  for (const auto& t : ts) t.copy_in();
}

void copy_out(const std::vector<StagedTensor>& ts) {
  for (const auto& t : ts) t.copy_out();
}

}  // namespace pycomm
