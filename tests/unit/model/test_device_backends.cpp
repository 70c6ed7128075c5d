// Device selection (model/model.h): load_model dispatches on ModelOptions::device to a registered backend and
// explains a device this build does not have; the default Model::forward_batch equals per-chunk forward().
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "model/model.h"

namespace deepinfer {
namespace {

const std::string kTiny = std::string(DEEPINFER_SOURCE_DIR) + "/tests/golden/fixtures/v4_tiny";

TEST(DeviceBackends, UnknownDeviceIsExplained) {
  ModelOptions o;
  o.show_progress = false;
  o.device = "tpu";
  try {
    load_model(kTiny, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device 'tpu' is not available"), std::string::npos) << e.what();
  }
}

TEST(DeviceBackends, RegisteredLoaderIsUsed) {
  int calls = 0;
  register_device_backend("test-device", [&](const std::string& dir, const ModelOptions& o) {
    ++calls;
    ModelOptions cpu = o;
    cpu.device = "cpu";
    return load_model(dir, cpu);
  });
  ModelOptions o;
  o.show_progress = false;
  o.device = "test-device";
  auto m = load_model(kTiny, o);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(m->config().vocab_size, 512);
}

TEST(DeviceBackends, DefaultForwardBatchEqualsForward) {
  ModelOptions o;
  o.show_progress = false;
  auto m = load_model(kTiny, o);
  const std::vector<int32_t> a{5, 6, 7, 8}, b{9, 10};
  auto sa = m->new_sequence(), sb = m->new_sequence();
  std::vector<BatchChunk> chunks{{sa.get(), a, true, nullptr}, {sb.get(), b, false, nullptr}};
  std::vector<std::vector<float>> last;
  m->forward_batch(chunks, last);
  ASSERT_EQ(last.size(), 2u);
  EXPECT_TRUE(last[1].empty());
  auto ref = m->new_sequence();
  Tensor full = m->forward(*ref, a);
  ASSERT_EQ(last[0].size(), size_t(m->config().vocab_size));
  for (int64_t v = 0; v < m->config().vocab_size; ++v) ASSERT_EQ(last[0][size_t(v)], full.row(3)[v]);
  EXPECT_EQ(sa->length(), 4);
  EXPECT_EQ(sb->length(), 2);
}

}  // namespace
}  // namespace deepinfer
