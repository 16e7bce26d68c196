// data.arrays as a team would use it: the examples' arrays (Debian's Fashion-MNIST as
// NumPy arrays, a tabular regression set in a safetensors file, both written by
// examples/arrays/make_arrays.py) trained from the examples' job files through `stoke
// submit` on a real coordinator's CPU worker; arrays Stoke cannot train on are refused at
// submission, naming the field and the file, and nothing is stored for them.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/cli_job_suite.h"

namespace stoke::testing {
namespace {

const std::string kExamples = std::string(STOKE_SOURCE_DIR) + "/examples/arrays";

class ArrayJobsTest : public CliJobSuite {
 protected:
  static std::string Arrays() { return DataDir() + "/datasets/arrays"; }

  static void SetUpTestSuite() {
    CommandResult made = RunCommand({"/usr/bin/python3", kExamples + "/make_arrays.py", Arrays()});
    if (made.exit_code == 0) {  // and an array in a dtype Stoke does not train on
      made = RunCommand({"/usr/bin/python3", "-c",
                         "import numpy as np, sys; np.save(sys.argv[1], np.zeros((100, 4)))",
                         Arrays() + "/f64.npy"});
    }
    DataMade(std::move(made));
  }

  // The example job file `name`, reading the arrays made for this test, with `steps`.
  std::string Example(const std::string& name, const std::string& steps) {
    std::ifstream in(kExamples + "/" + name);
    std::stringstream text;
    text << in.rdbuf();
    std::string job = std::regex_replace(
        text.str(), std::regex(R"(\.\./\.\./\.stoke/datasets/arrays)"), Arrays());
    job = std::regex_replace(job, std::regex(R"((epochs|steps): \d+)"), "steps: " + steps);
    std::string path = files_.File(name);
    std::ofstream(path) << job;
    return path;
  }

  // The last "job J eval at step N: loss L[, accuracy A%]" line `stoke submit --watch` printed.
  static std::smatch LastEval(const std::string& watched) {
    static const std::regex eval(
        R"(job \d+ eval at step \d+: loss ([0-9.]+)(, accuracy ([0-9.]+)%)?)");
    std::smatch last;
    for (auto it = std::sregex_iterator(watched.begin(), watched.end(), eval);
         it != std::sregex_iterator(); ++it) {
      last = *it;
    }
    return last;
  }
};

// Images stored [N, 28, 28, 1] uint8, labels uint8: the CNN learns the real data from them
// as it does from the idx files (about 87% after 300 steps).
TEST_F(ArrayJobsTest, FashionMnistFromNumPyArraysTrainsToItsUsualAccuracy) {
  const CommandResult run =
      Stoke({"submit", Example("fashion-mnist-arrays.yaml", "300"), "--watch"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err << coordinator().Log();
  EXPECT_NE(run.out.find("SUCCEEDED"), std::string::npos) << run.out;
  const std::smatch eval = LastEval(run.out);
  ASSERT_FALSE(eval.empty()) << run.out;
  EXPECT_GT(std::stod(eval[3]), 80.0) << eval[0];
  EXPECT_NE(run.out.find("on 10000 held-out samples"), std::string::npos) << run.out;
}

// Float16 features and a float32 target, two tensors of one safetensors file: regression,
// with a tenth of the rows held out. The target's variance is about 0.9; the noise's 0.0025.
TEST_F(ArrayJobsTest, RegressionFromASafetensorsFileLearnsItsTarget) {
  const CommandResult run = Stoke({"submit", Example("regression.yaml", "600"), "--watch"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err << coordinator().Log();
  const std::smatch eval = LastEval(run.out);
  ASSERT_FALSE(eval.empty()) << run.out;
  EXPECT_LT(std::stod(eval[1]), 0.05) << eval[0];
  EXPECT_NE(run.out.find("on 2000 held-out samples"), std::string::npos) << run.out;
}

TEST_F(ArrayJobsTest, ArraysStokeCannotTrainOnAreRefusedNamingFieldAndFile) {
  const std::string before = StoredJobs();
  const auto submit = [&](const std::string& model, const std::string& inputs,
                          const std::string& targets) {
    const std::string path = files_.File("bad.yaml");
    std::ofstream(path) << "model: {" << model
                        << ": {}}\ndata:\n  arrays:\n    inputs: " << Arrays() << "/" << inputs
                        << "\n    targets: " << Arrays() << "/" << targets
                        << "\ntraining: {steps: 10}\n";
    const CommandResult r = Stoke({"submit", path});
    EXPECT_NE(r.exit_code, 0) << r.out;
    return r.err;
  };
  EXPECT_NE(submit("mlp", "f64.npy", "fashion-mnist-test-labels.npy")
                .find("data.arrays.inputs: " + Arrays() +
                      "/f64.npy: dtype <f8 is not one Stoke trains on"),
            std::string::npos);
  EXPECT_NE(submit("mlp", "fashion-mnist-train-images.npy", "fashion-mnist-test-labels.npy")
                .find("data.arrays.targets: " + Arrays() +
                      "/fashion-mnist-test-labels.npy has 10000 rows and data.arrays.inputs"),
            std::string::npos);
  EXPECT_NE(submit("mlp", "regression.safetensors", "regression.safetensors:target")
                .find("holds 2 tensors; name one after a colon (FILE:NAME): features, target"),
            std::string::npos);
  EXPECT_NE(submit("cnn", "fashion-mnist-test-images.npy", "regression.safetensors:target")
                .find("data.arrays.targets"),
            std::string::npos);
  EXPECT_NE(submit("resnet", "regression.safetensors:features", "regression.safetensors:target")
                .find("model.resnet: needs images"),
            std::string::npos);
  EXPECT_EQ(StoredJobs(), before) << "a refused job was stored";
}

// Before submitting: what Stoke would read from each file, and the problem with a bad one.
TEST_F(ArrayJobsTest, DataInspectSaysWhatStokeWouldReadAndWhatIsWrong) {
  const std::string& a = Arrays();
  const CommandResult good =
      RunCommand({STOKE_CLI_BINARY, "data", "inspect", a + "/fashion-mnist-train-images.npy",
                  a + "/fashion-mnist-train-labels.npy", a + "/regression.safetensors"});
  EXPECT_EQ(good.exit_code, 0) << good.err;
  for (const std::string& line :
       {a + "/fashion-mnist-train-images.npy: array uint8 [60000, 28, 28, 1]: 60000 samples of "
            "[28, 28, 1], images as inputs\n",
        a + "/fashion-mnist-train-labels.npy: array uint8 [60000]: 60000 samples; as targets, "
            "class indices 0-9 (10 classes)\n",
        a + "/regression.safetensors:features: array float16 [20000, 16]: 20000 samples of [16]",
        a + "/regression.safetensors:target: array float32 [20000]: 20000 samples; as targets, "
            "regression\n"}) {
    EXPECT_NE(good.out.find(line), std::string::npos) << line << "\nnot in:\n" << good.out;
  }
  const CommandResult bad = RunCommand(
      {STOKE_CLI_BINARY, "data", "inspect", a + "/f64.npy", a + "/regression.safetensors:nope"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find(a + "/f64.npy: problem: " + a + "/f64.npy: dtype <f8"), std::string::npos)
      << bad.out;
  EXPECT_NE(bad.out.find("no tensor named nope; it holds: features, target"), std::string::npos)
      << bad.out;
}

}  // namespace
}  // namespace stoke::testing
