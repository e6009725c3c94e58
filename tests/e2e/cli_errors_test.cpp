// Bad configurations and bad command lines exit with code 2 and a message that names the key or file, within
// 1 s;
// --help and --version work on every level.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "cli_process.h"
#include "scratch_dir.h"

namespace primus::cli_test {
namespace {

namespace fs = std::filesystem;

class ConfigCliErrors : public ScratchDirTest {
 protected:
  // An experiment on our micro model with these override lines.
  std::string experiment(const std::string& overrides, const std::string& model = "micro_llama.yaml") {
    return write("exp.yaml",
                 "work_group: g\nuser_name: u\nexp_name: e\nworkspace: ./w\nmodules:\n  pre_trainer:\n"
                 "    framework: megatron\n    config: pre_trainer.yaml\n    model: " +
                     model + "\n    overrides:\n      mock_data: true\n" + overrides);
  }
  // Runs a dry run and checks the common contract of a refused configuration.
  CliResult refuse(const std::vector<std::string>& args,
                   std::map<std::string, std::optional<std::string>> env = {}) {
    CliResult r = run_primus(args, std::move(env));
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_LT(r.cpu_seconds, 1.0) << "config errors come before anything is built";
    EXPECT_NE(r.err.find("primus: error: "), std::string::npos) << r.err;
    return r;
  }
  CliResult refuse_experiment(const std::string& path) {
    return refuse({"train", "pretrain", "--config", path, "--dry-run"});
  }
};

TEST_F(ConfigCliErrors, TypoKeyNamesFileLineColumnAndSuggests) {
  CliResult r = refuse_experiment(experiment("      micro_batch_sise: 2\n"));
  EXPECT_NE(r.err.find("exp.yaml:12:7: unknown key 'micro_batch_sise'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did you mean 'micro_batch_size'"), std::string::npos) << r.err;
}

TEST_F(ConfigCliErrors, WrongTypeNamesKeyAndValue) {
  CliResult r = refuse_experiment(experiment("      train_iters: [1, 2]\n"));
  EXPECT_NE(r.err.find("train_iters has the wrong type"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[1, 2]"), std::string::npos) << r.err;
}

TEST_F(ConfigCliErrors, MissingPresetFileIsNamed) {
  CliResult r = refuse_experiment(experiment("", "micro_lama.yaml"));
  EXPECT_NE(r.err.find("model preset 'micro_lama.yaml' not found"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did you mean 'micro_llama.yaml'"), std::string::npos) << r.err;
  CliResult missing_exp = refuse_experiment((dir_ / "nope.yaml").string());
  EXPECT_NE(missing_exp.err.find("nope.yaml"), std::string::npos) << missing_exp.err;
}

TEST_F(ConfigCliErrors, UnsetVariableIsNamed) {
  CliResult r = refuse_experiment(experiment("      text_data_path: ${MY_CORPUS_DIR}/x\n"));
  EXPECT_NE(r.err.find("MY_CORPUS_DIR"), std::string::npos) << r.err;
}

TEST_F(ConfigCliErrors, CyclicExtendsNamesTheChain) {
  write("root/modules/megatron/a.yaml", "extends: [b.yaml]\n");
  write("root/modules/megatron/b.yaml", "extends: [a.yaml]\n");
  std::string exp = write("cyc.yaml",
                          "work_group: g\nuser_name: u\nexp_name: e\nworkspace: w\nmodules:\n  pre_trainer:\n"
                          "    framework: megatron\n    config: a.yaml\n    model: micro_llama.yaml\n");
  CliResult r = refuse({"train", "pretrain", "--config", exp, "--dry-run"},
                       {{"PRIMUS_CONFIG_PATH", (dir_ / "root").string()}});
  EXPECT_NE(r.err.find("cyclic extends"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("a.yaml"), std::string::npos) << r.err;
}

TEST_F(ConfigCliErrors, NonDivisibleBatchNamesKeysAndRule) {
  CliResult r = refuse_experiment(experiment("      global_batch_size: 10\n      micro_batch_size: 4\n"));
  EXPECT_NE(r.err.find("global_batch_size=10"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("micro_batch_size=4"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rule:"), std::string::npos) << r.err;
  CliResult world = refuse({"train", "pretrain", "--config", experiment("      global_batch_size: 8\n"),
                            "--micro_batch_size", "4", "--dry-run"},
                           {{"WORLD_SIZE", "3"}});
  EXPECT_NE(world.err.find("data-parallel size 3"), std::string::npos) << world.err;
}

TEST_F(ConfigCliErrors, NotSupportedYetExitsTwo) {
  CliResult r = refuse_experiment(experiment("      fp4: e2m1\n"));
  EXPECT_NE(r.err.find("not supported yet: fp4=e2m1"), std::string::npos) << r.err;
}

TEST_F(ConfigCliErrors, CommandLineMistakes) {
  CliResult no_config = refuse({"train", "pretrain", "--dry-run"});
  EXPECT_NE(no_config.err.find("--config FILE is required"), std::string::npos) << no_config.err;
  CliResult positional = refuse({"train", "pretrain", "exp.yaml"});
  EXPECT_NE(positional.err.find("did you mean `--config exp.yaml`"), std::string::npos) << positional.err;
  CliResult command = refuse({"trian", "pretrain"});
  EXPECT_NE(command.err.find("unknown command 'trian'"), std::string::npos) << command.err;
  EXPECT_NE(command.err.find("did you mean 'train'"), std::string::npos) << command.err;
  CliResult root_option = refuse({"--verison"});
  EXPECT_NE(root_option.err.find("unknown option '--verison' for primus; did you mean '--version'"),
            std::string::npos)
      << root_option.err;
  CliResult sub = refuse({"train", "pretrian"});
  EXPECT_NE(sub.err.find("did you mean 'pretrain'"), std::string::npos) << sub.err;
  std::string exp = experiment("");
  CliResult option = refuse({"train", "pretrain", "--config", exp, "--dryrun"});
  EXPECT_NE(option.err.find("did you mean '--dry-run'"), std::string::npos) << option.err;
  CliResult key = refuse({"train", "pretrain", "--config", exp, "--dry-run", "--trian_iters", "3"});
  EXPECT_NE(key.err.find("command line (--trian_iters 3)"), std::string::npos) << key.err;
  EXPECT_NE(key.err.find("did you mean 'train_iters'"), std::string::npos) << key.err;
  CliResult meta = refuse({"train", "pretrain", "--config", exp, "--dry-run", "--exp_name", "x"});
  EXPECT_NE(meta.err.find("'exp_name' is an experiment-level key"), std::string::npos) << meta.err;
  CliResult stray = refuse({"train", "pretrain", "--config", exp, "--dry-run", "--lr", "1e-3", "oops"});
  EXPECT_NE(stray.err.find("'oops'"), std::string::npos) << stray.err;
  CliResult bad_value = refuse({"train", "pretrain", "--config", exp, "--dry-run", "--lr", "fast"});
  EXPECT_NE(bad_value.err.find("lr has the wrong type"), std::string::npos) << bad_value.err;
  EXPECT_NE(bad_value.err.find("command line (--lr fast)"), std::string::npos) << bad_value.err;
  CliResult noop = refuse({"train"});
  CliResult root = refuse({});
}

TEST_F(ConfigCliErrors, HelpAndVersion) {
  CliResult v = run_primus({"--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.out.rfind("primus ", 0), 0u) << v.out;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--help"}, {"train", "--help"}, {"train", "pretrain", "--help"}}) {
    CliResult h = run_primus(args);
    EXPECT_EQ(h.exit_code, 0) << h.err;
    EXPECT_NE(h.out.find("Usage"), std::string::npos) << h.out;
  }
  CliResult h = run_primus({"train", "pretrain", "--help"});
  EXPECT_NE(h.out.find("--dry-run"), std::string::npos);
  EXPECT_NE(h.out.find("--exp"), std::string::npos);
  EXPECT_NE(h.out.find("key=value"), std::string::npos);
}

}  // namespace
}  // namespace primus::cli_test
