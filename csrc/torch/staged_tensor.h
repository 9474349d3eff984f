// A caller's tensor as the plans take it (plan.h: contiguous, 1-D, of a core
// dtype), whatever its layout. A contiguous tensor is used in place. Any other
// strided tensor (transposed, a slice with steps, an expanded input, a conj or
// neg view) is copied into a contiguous buffer before the plan runs and back
// through the caller's view after, so the call's result is that of the same
// collective on a contiguous copy, and nothing outside the view's elements is
// written. Copies move bits (copy_bits), so no value is changed on the way:
// not a NaN's payload, not a bool's byte, not a dtype torch cannot convert.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace pycomm {

// dst = src, bit for bit, through any strides (same dtype and shape). A conj
// or neg view is resolved (its values are copied, as torch's copy_ does).
void copy_bits(const at::Tensor& dst, const at::Tensor& src);
// A contiguous copy of `t`, bit for bit (torch's clone() writes a bool's byte as 0 or 1).
at::Tensor clone_bits(const at::Tensor& t);

class StagedTensor {
 public:
  // What the collective does with the caller's tensor: reads it, writes it, or both.
  enum Use { kIn = 1, kOut = 2, kInOut = 3 };

  StagedTensor() = default;
  // Whether `t` needs a buffer: it is not contiguous, or a conj or neg view.
  static bool needed(const at::Tensor& t) { return !t.is_contiguous() || t.is_conj() || t.is_neg(); }
  // At call time: allocates the buffer when one is needed (copies nothing).
  StagedTensor(const at::Tensor& t, Use use);

  const at::Tensor& user() const { return user_; }
  // What the plan gets: 1-D, contiguous, complex viewed as pairs of reals.
  const at::Tensor& flat() const { return flat_; }
  bool staged() const { return staged_; }

  // In the job, in call order: the caller's values into the buffer before the
  // plan runs (inputs), and back through the caller's view after (outputs).
  void copy_in() const;
  void copy_out() const;

 private:
  at::Tensor user_;
  at::Tensor buffer_;  // the caller's tensor, or a contiguous copy of its shape and dtype
  at::Tensor flat_;
  Use use_ = kIn;
  bool staged_ = false;
};

std::vector<StagedTensor> staged_each(const std::vector<at::Tensor>& ts, StagedTensor::Use use);
std::vector<at::Tensor> flats_of(const std::vector<StagedTensor>& ts);
void copy_in(const std::vector<StagedTensor>& ts);
void copy_out(const std::vector<StagedTensor>& ts);

}  // namespace pycomm
