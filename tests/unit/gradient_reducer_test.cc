// How GradientReducer lays parameters out in buckets and what .grad is after a reduced
// backward, on a real one-rank Gloo group: the first and last buckets are small, the
// gradients are autograd's own values, and each .grad is a slice of its bucket; a layer
// that takes the slice offered for its weight writes the gradient there, a weight used
// twice still gets both contributions, and micro-steps' gradients still add up.
#include "worker/dist/gradient_reducer.h"
#include "worker/ops/gradient_destinations.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "worker/dist/communicator.h"
#include "worker/ops/gradient_destinations.h"

namespace stoke::worker {
namespace {

// Null where the build has no Gloo (the torch wheel on the GPU machines): tests skip.
std::unique_ptr<Communicator> OneRankGroup() {
  std::string why_not;
  if (!Communicator::Supported(torch::kCPU, &why_not)) return nullptr;
  TrainTask task;
  task.rank = 0;
  task.world_size = 1;
  task.distributed.rendezvous_address = "127.0.0.1:" + std::to_string(testing::FreePort());
  task.distributed.advertise_address = "127.0.0.1";
  task.distributed.timeout_seconds = 20;
  return Communicator::Connect(task, torch::kCPU);
}

// Registration order, as a network's: a small stem first, the output layer last.
std::vector<torch::Tensor> Parameters() {
  torch::manual_seed(3);
  std::vector<torch::Tensor> p;
  for (int64_t n : {50, 100, 600, 600, 600, 600, 300}) p.push_back(torch::randn({n}));
  for (auto& t : p) t.requires_grad_();
  return p;
}

std::vector<std::vector<const void*>> Layout(const GradientReducer& reducer) {
  std::vector<std::vector<const void*>> layout;
  for (const auto& bucket : reducer.BucketParameters()) {
    auto& ids = layout.emplace_back();
    for (const auto& p : bucket) ids.push_back(p.unsafeGetTensorImpl());
  }
  return layout;
}

TEST(GradientReducer, FirstAndLastBucketsAreSmallAndGradsAreBucketSlices) {
  auto communicator = OneRankGroup();
  if (!communicator) GTEST_SKIP() << "this build has no Gloo for CPU ranks";
  auto p = Parameters();
  // First bucket 1 KB, the rest 4 KB: in reverse order p6 (1.2 KB) fills the first,
  // p5 + p4 and p3 + p2 the next two, p1 + p0 would be the last (0.6 KB, small already).
  {
    GradientDestinations destinations;
    GradientReducer reducer(p, *communicator, destinations, 4 << 10, 1 << 10);
    auto id = [&](size_t i) -> const void* { return p[i].unsafeGetTensorImpl(); };
    EXPECT_EQ(Layout(reducer), (std::vector<std::vector<const void*>>{
                                   {id(6)}, {id(5), id(4)}, {id(3), id(2)}, {id(1), id(0)}}));
  }
  // With 6 KB buckets the last one would be p2 + p1 + p0 (3 KB): the stem's p0 and p1,
  // whose gradients come last, get a small bucket of their own.
  GradientDestinations destinations;
  GradientReducer reducer(p, *communicator, destinations, 6 << 10, 1 << 10);
  auto id = [&](size_t i) -> const void* { return p[i].unsafeGetTensorImpl(); };
  EXPECT_EQ(Layout(reducer), (std::vector<std::vector<const void*>>{
                                 {id(6)}, {id(5), id(4), id(3)}, {id(2)}, {id(1), id(0)}}));

  // A reduced backward gives autograd's gradients (one rank: the mean is the value),
  // each .grad a slice of its bucket.
  auto loss = [&] {
    torch::Tensor total = torch::zeros({});
    for (size_t i = 0; i < p.size(); ++i) total = total + (p[i] * p[i]).sum() * (i + 1.0);
    return total;
  };
  loss().backward();
  std::vector<torch::Tensor> expected;
  for (auto& t : p) {
    expected.push_back(t.grad().clone());
    t.mutable_grad().reset();
  }
  reducer.Arm();
  loss().backward();
  reducer.Finish();
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_TRUE(torch::allclose(p[i].grad(), expected[i])) << "parameter " << i;
  }
  auto storage = [](const torch::Tensor& t) { return t.storage().unsafeGetStorageImpl(); };
  EXPECT_EQ(storage(p[5].grad()), storage(p[3].grad())) << "p5 and p3 share a bucket";
  EXPECT_EQ(storage(p[1].grad()), storage(p[0].grad())) << "p1 and p0 share a bucket";
  EXPECT_NE(storage(p[2].grad()), storage(p[1].grad())) << "p2 and p1 do not";
}

// Where the reducer below offers its slices, as a run's StepContext holds them.
GradientDestinations& Destinations() {
  static GradientDestinations destinations;
  return destinations;
}

// x * w, elementwise, whose backward writes w's gradient into the place offered for it
// (as AutocastLinear does on a GPU) and notes where that was.
std::map<const void*, const void*>& WrittenTo() {
  static std::map<const void*, const void*> written;  // weight -> gradient's data
  return written;
}

class ScaleByWeight : public torch::autograd::Function<ScaleByWeight> {
 public:
  static torch::Tensor forward(  // NOLINT(readability-identifier-naming)
      torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w) {
    ctx->save_for_backward({x});
    ctx->saved_data["key"] = reinterpret_cast<int64_t>(w.unsafeGetTensorImpl());
    return x * w;
  }
  static torch::autograd::variable_list backward(  // NOLINT(readability-identifier-naming)
      torch::autograd::AutogradContext* ctx, const torch::autograd::variable_list& grads) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    const auto* key = reinterpret_cast<const void*>(ctx->saved_data["key"].toInt());
    torch::Tensor dw = Destinations().Take(key);
    if (dw.defined()) {
      WrittenTo()[key] = dw.data_ptr();
    } else {
      dw = torch::empty_like(x);
    }
    torch::mul_out(dw, grads[0], x);
    return {torch::Tensor(), dw};  // x needs no gradient here
  }
};

TEST(GradientReducer, ALayerWritesIntoTheOfferedSliceAndEveryContributionCounts) {
  auto communicator = OneRankGroup();
  if (!communicator) GTEST_SKIP() << "this build has no Gloo for CPU ranks";
  torch::manual_seed(5);
  std::vector<torch::Tensor> w = {torch::randn({40}), torch::randn({30}), torch::randn({20})};
  for (auto& t : w) t.requires_grad_();
  const std::vector<torch::Tensor> x = {torch::randn({40}), torch::randn({30}), torch::randn({30})};
  // w[0] through the layer once, w[1] twice (its second product finds no offer left),
  // w[2] through ordinary operations.
  auto loss = [&] {
    return ScaleByWeight::apply(x[0], w[0]).sum() + (ScaleByWeight::apply(x[1], w[1]) * 2).sum() +
           ScaleByWeight::apply(x[2], w[1]).sum() + (w[2] * w[2]).sum();
  };
  loss().backward();
  std::vector<torch::Tensor> expected;
  for (auto& t : w) {
    expected.push_back(t.grad().clone());
    t.mutable_grad().reset();
  }
  EXPECT_TRUE(WrittenTo().empty()) << "nothing is offered unless the reducer is armed";

  GradientReducer reducer(w, *communicator, Destinations(), 1 << 20, 1 << 20);
  reducer.Arm();
  loss().backward();
  reducer.Finish();
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_TRUE(torch::allclose(w[i].grad(), expected[i])) << "weight " << i;
  }
  ASSERT_EQ(WrittenTo().size(), 2u) << "w[0] and w[1] took their slices";
  for (const auto& t : w) {
    EXPECT_FALSE(Destinations().Take(t.unsafeGetTensorImpl()).defined())
        << "no offer outlives the backward it was made for";
  }
  EXPECT_EQ(WrittenTo()[w[0].unsafeGetTensorImpl()], w[0].grad().data_ptr())
      << "w[0]'s gradient stayed where the layer wrote it";
  EXPECT_EQ(WrittenTo()[w[1].unsafeGetTensorImpl()], w[1].grad().data_ptr())
      << "w[1]'s slice holds the sum of both products";

  // Two micro-steps: the first accumulates in .grad, unreduced; the second, armed, adds
  // to it. No slice is offered then (it would drop the first micro-step's part).
  for (auto& t : w) t.mutable_grad().reset();
  WrittenTo().clear();
  loss().backward();
  reducer.Arm();
  loss().backward();
  reducer.Finish();
  EXPECT_TRUE(WrittenTo().empty());
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_TRUE(torch::allclose(w[i].grad(), expected[i] * 2)) << "weight " << i;
  }
}

// The order a backward delivers gradients in, not the order of registration, decides the
// buckets from the second reduced step on.
TEST(GradientReducer, BucketsFollowTheOrderTheFirstBackwardGaveGradientsIn) {
  auto communicator = OneRankGroup();
  if (!communicator) GTEST_SKIP() << "this build has no Gloo for CPU ranks";
  torch::manual_seed(4);
  std::vector<torch::Tensor> p;
  for (int i = 0; i < 4; ++i) p.push_back(torch::randn({300}).requires_grad_());
  // Terms out of registration order; each parameter notes when its gradient comes.
  std::vector<const void*> arrived;
  for (auto& t : p) {
    const void* id = t.unsafeGetTensorImpl();
    t.register_hook([&arrived, id](const torch::Tensor& g) {
      arrived.push_back(id);
      return g;
    });
  }
  auto loss = [&] {
    return (p[2] * p[2]).sum() + (p[0] * p[0]).sum() + (p[3] * p[3]).sum() + (p[1] * p[1]).sum();
  };
  auto id = [&](size_t i) -> const void* { return p[i].unsafeGetTensorImpl(); };
  // 1.2 KB each: every bucket holds one parameter.
  GradientDestinations destinations;
  GradientReducer reducer(p, *communicator, destinations, 1000, 1000);
  const auto registration =
      std::vector<std::vector<const void*>>{{id(3)}, {id(2)}, {id(1)}, {id(0)}};
  EXPECT_EQ(Layout(reducer), registration);
  std::vector<std::vector<const void*>> observed;
  for (int step = 0; step < 2; ++step) {
    arrived.clear();
    reducer.Arm();
    loss().backward();
    reducer.Finish();
    if (step == 0) {
      for (const void* a : arrived) observed.push_back({a});
    }
    for (size_t i = 0; i < p.size(); ++i) {
      EXPECT_TRUE(torch::allclose(p[i].grad(), 2 * p[i])) << "step " << step << ", p" << i;
      p[i].mutable_grad().reset();
    }
  }
  ASSERT_NE(observed, registration) << "the terms should have changed the order";
  EXPECT_EQ(Layout(reducer), observed);
}

}  // namespace
}  // namespace stoke::worker
