// `primus launch` end to end: torchrun variables, [rank N] prefixes, a failing or killed rank stops the
// others and is named, SIGTERM is forwarded, and the tcp backend's selftest (every collective, groups) and
// failure paths (a dead rank, a hung rank) across real processes.
#include <gtest/gtest.h>
#include <signal.h>

#include <fmt/format.h>

#include <thread>

#include "comm/socket_util.h"
#include "e2e/cli_process.h"

namespace primus::cli_test {
namespace {

std::vector<std::string> launch(int n, std::vector<std::string> command) {
  std::vector<std::string> args = {
      "launch", "--nproc-per-node", std::to_string(n), "--master-port", "0", "--grace", "3", "--"};
  args.insert(args.end(), command.begin(), command.end());
  return args;
}

TEST(ParallelLauncher, SetsTorchrunVariablesAndPrefixesLines) {
  CliResult r =
      run_primus(launch(3, {"/bin/sh", "-c",
                            "echo R=$RANK W=$WORLD_SIZE L=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE G=$GROUP_RANK "
                            "M=$MASTER_ADDR; echo err >&2"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(r.out.find(fmt::format("[rank {}] R={} W=3 L={} LW=3 G=0 M=127.0.0.1", i, i, i)),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.err.find(fmt::format("[rank {}] err", i)), std::string::npos) << r.err;
  }
}

TEST(ParallelLauncher, PassesTheCommandsWordsVerbatim) {
  // A list value (decoder_pipeline_manual_split_list [3,2,2,1]), a word with spaces and a second `--` reach
  // every rank as they were given (CLI11 used to split the list into four words).
  CliResult r = run_primus(launch(
      2, {"/bin/sh", "-c", "printf '<%s>' \"$@\"; echo", "sh", "--split", "[3,2,2,1]", "a b", "--", "-x"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (int i = 0; i < 2; ++i)
    EXPECT_NE(r.out.find(fmt::format("[rank {}] <--split><[3,2,2,1]><a b><--><-x>", i)), std::string::npos)
        << r.out;
  // The global flag before the command still works.
  r = run_primus(
      {"--debug", "launch", "--nproc-per-node", "1", "--master-port", "0", "--", "/bin/echo", "[1,2]"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 0] [1,2]"), std::string::npos) << r.out;
}

TEST(ParallelLauncher, AFailingRankStopsTheOthersAndIsNamed) {
  CliResult r = run_primus(launch(3, {"/bin/sh", "-c", "if [ $RANK = 1 ]; then exit 3; fi; sleep 60"}));
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("primus launch: failed: rank 1 exited with code 3"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 20);
}

TEST(ParallelLauncher, AKilledRankIsNamedAndTheOthersGetSigkillAfterTheGrace) {
  // Rank 0 ignores SIGTERM: the launcher must escalate to SIGKILL after --grace.
  CliResult r = run_primus(launch(
      2, {"/bin/sh", "-c", "if [ $RANK = 1 ]; then sleep 0.3; kill -9 $$; fi; trap '' TERM; sleep 60"}));
  EXPECT_EQ(r.exit_code, 128 + 9);
  EXPECT_NE(r.err.find("rank 1 was killed by SIGKILL"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sending SIGKILL"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 20);
}

TEST(ParallelLauncher, NamesTheKilledRankNotThePeersThatFailedAroundIt) {
  // Under load the peers of a killed rank (failing on the broken connection) can be reaped before it. Here
  // they are, on purpose: ranks 0 and 1 exit 1 at once, rank 2 is killed 0.15 s later. Within the launcher's
  // settle window the rank killed by a signal is the root cause and must be the one named.
  CliResult r = run_primus(launch(
      4, {"/bin/sh", "-c", "case $RANK in 2) sleep 0.15; kill -9 $$ ;; 0|1) exit 1 ;; esac; sleep 60"}));
  EXPECT_EQ(r.exit_code, 128 + 9);
  EXPECT_NE(r.err.find("primus launch: failed: rank 2 was killed by SIGKILL"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("primus launch: rank 0 exited with code 1 too"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 20);
}

TEST(ParallelLauncher, ForwardsSigterm) {
  std::string dir = (std::filesystem::temp_directory_path() / "primus-launch-XXXXXX").string();
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open((dir + "/err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    int out = open((dir + "/out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    std::vector<std::string> args = launch(2, {"/bin/sh", "-c",
                                               "trap 'echo got-term; exit 0' TERM; echo ready; "
                                               "while true; do sleep 0.1; done"});
    std::string bin = PRIMUS_BINARY;
    std::vector<char*> argv = {bin.data()};
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  // SIGTERM once both ranks have set their trap (a fixed sleep lost that race on a loaded 2-core machine).
  const auto ready_by = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (std::chrono::steady_clock::now() < ready_by) {
    const std::string o = slurp(dir + "/out");
    if (o.find("[rank 0] ready") != std::string::npos && o.find("[rank 1] ready") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGTERM);
  int status = 0;
  auto start = std::chrono::steady_clock::now();
  waitpid(pid, &status, 0);
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  EXPECT_LT(waited, 10);
  std::string out = slurp(dir + "/out"), err = slurp(dir + "/err");
  EXPECT_NE(out.find("[rank 0] got-term"), std::string::npos) << out << err;
  EXPECT_NE(out.find("[rank 1] got-term"), std::string::npos) << out << err;
  EXPECT_NE(err.find("forwarding it to the ranks"), std::string::npos) << err;
  std::filesystem::remove_all(dir);
}

TEST(ParallelLauncher, BadArguments) {
  CliResult r = run_primus({"launch", "--nproc-per-node", "0", "--", "comm", "selftest"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--nproc-per-node 0 must be >= 1"), std::string::npos) << r.err;
  r = run_primus({"launch", "--nnodes", "2", "--node-rank", "0", "--master-port", "0", "--", "x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--master-port 0"), std::string::npos) << r.err;
}

TEST(ParallelLauncher, GivesEveryRankTheSameFreshTokenAndNeverPrintsIt) {
  // ${#PRIMUS_JOB_TOKEN} and a hash of it: the ranks agree, runs differ, and the value is not in the output.
  const std::vector<std::string> cmd = {"/bin/sh", "-c",
                                        "echo T=${#PRIMUS_JOB_TOKEN} H=$(printf %s \"$PRIMUS_JOB_TOKEN\" | "
                                        "cksum | cut -d' ' -f1)"};
  CliResult a = run_primus(launch(2, cmd), {{"PRIMUS_JOB_TOKEN", std::nullopt}});
  CliResult b = run_primus(launch(2, cmd), {{"PRIMUS_JOB_TOKEN", std::nullopt}});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto hash_of = [](const std::string& out, int rank) {
    const std::string tag = fmt::format("[rank {}] T=64 H=", rank);
    const auto at = out.find(tag);
    return at == std::string::npos ? std::string("none")
                                   : out.substr(at + tag.size(), out.find('\n', at) - at - tag.size());
  };
  EXPECT_NE(hash_of(a.out, 0), "none") << a.out;
  EXPECT_EQ(hash_of(a.out, 0), hash_of(a.out, 1)) << a.out;
  EXPECT_NE(hash_of(a.out, 0), hash_of(b.out, 0)) << a.out << b.out;
  // A token the user set is passed on unchanged.
  CliResult c = run_primus(
      launch(1, {"/bin/sh", "-c", "test \"$PRIMUS_JOB_TOKEN\" = user-token-0123456789 && echo same"}),
      {{"PRIMUS_JOB_TOKEN", "user-token-0123456789"}});
  EXPECT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("[rank 0] same"), std::string::npos) << c.out;
}

TEST(ParallelLauncher, TokenErrors) {
  // Nodes cannot agree on a generated token: a multi-node job beyond loopback must set one.
  CliResult r = run_primus({"launch", "--nnodes", "2", "--node-rank", "0", "--master-addr", "10.255.255.1",
                            "--master-port", "29999", "--", "/bin/true"},
                           {{"PRIMUS_JOB_TOKEN", std::nullopt}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--nnodes 2: PRIMUS_JOB_TOKEN is not set"), std::string::npos) << r.err;
  // A short token is refused by its length; its value is not printed.
  r = run_primus(launch(1, {"/bin/true"}), {{"PRIMUS_JOB_TOKEN", "shortsecret"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("PRIMUS_JOB_TOKEN has 11 characters (at least 16 needed)"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("shortsecret"), std::string::npos) << r.err;
}

TEST(CommTcpProcesses, ARankWithTheWrongTokenIsRefusedAndRankZeroNamesIt) {
  // As under srun with a per-rank mistake: rank 1 has a different token. Its store connection is refused (it
  // fails, naming the store), rank 0 logs the refused address and, with nobody to pair with, times out.
  const std::string port = std::to_string(comm::net::pick_free_port());
  std::vector<CliResult> results(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      results[r] = run_primus(
          {"comm", "selftest", "--sizes", "1"},
          {{"RANK", std::to_string(r)},
           {"WORLD_SIZE", "2"},
           {"LOCAL_RANK", std::to_string(r)},
           {"LOCAL_WORLD_SIZE", "2"},
           {"MASTER_ADDR", "127.0.0.1"},
           {"MASTER_PORT", port},
           {"PRIMUS_COMM_TIMEOUT_S", "8"},
           {"PRIMUS_JOB_TOKEN", r == 0 ? "the-right-token-0123456789" : "a-wrong-token-0123456789"}});
    });
  for (auto& t : ranks) t.join();
  EXPECT_NE(results[1].exit_code, 0);
  EXPECT_NE(results[1].err.find("refused this rank's job token"), std::string::npos) << results[1].err;
  EXPECT_NE(results[0].exit_code, 0);
  EXPECT_NE((results[0].out + results[0].err).find("tcp store: refused a connection from 127.0.0.1:"),
            std::string::npos)
      << results[0].out << results[0].err;
  for (const CliResult& r : results) EXPECT_EQ((r.out + r.err).find("0123456789"), std::string::npos);
}

TEST(CommTcpProcesses, SelftestOverFourRanks) {
  CliResult r = run_primus(launch(4, {"comm", "selftest", "--backend", "tcp", "--sizes", "1,31,1000"}));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 0] comm selftest (tcp backend, 4 ranks)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 failed on all ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("distributed: rank 0 of 4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("from torchrun"), std::string::npos) << r.out;
}

TEST(CommTcpProcesses, ADeadRankIsNamedByTheLauncherWithin30s) {
  CliResult r = run_primus(launch(3, {"comm", "selftest", "--fault", "die", "--fault-rank", "1"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 30);
  EXPECT_NE(r.err.find("primus launch: failed: rank 1 was killed by SIGKILL"), std::string::npos) << r.err;
}

TEST(CommTcpProcesses, WithoutTheLauncherTheSurvivorsNameTheDeadRank) {
  // As under srun or torchrun: nobody stops the survivors, they must see the dead rank themselves.
  const std::string port = std::to_string(comm::net::pick_free_port());
  std::vector<CliResult> results(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([&, r] {
      results[r] = run_primus({"comm", "selftest", "--fault", "die", "--fault-rank", "1"},
                              {{"RANK", std::to_string(r)},
                               {"WORLD_SIZE", "3"},
                               {"LOCAL_RANK", std::to_string(r)},
                               {"LOCAL_WORLD_SIZE", "3"},
                               {"MASTER_ADDR", "127.0.0.1"},
                               {"MASTER_PORT", port}});
    });
  for (auto& t : ranks) t.join();
  EXPECT_EQ(results[1].exit_code, 128 + SIGKILL);
  for (int r : {0, 2}) {
    EXPECT_EQ(results[r].exit_code, 1) << results[r].err;
    EXPECT_LT(results[r].seconds, 30);
    // "primus: error: rank 0, group world, op all_reduce 'fault injection' (seq 2): receiving from rank 1
    // failed (Connection reset by peer): that rank exited or was killed"
    EXPECT_NE(
        results[r].err.find(fmt::format("rank {}, group world, op all_reduce 'fault injection' (seq 2)", r)),
        std::string::npos)
        << results[r].err;
    EXPECT_NE(results[r].err.find("rank 1"), std::string::npos) << results[r].err;
    EXPECT_NE(results[r].err.find("that rank exited or was killed"), std::string::npos) << results[r].err;
  }
}

TEST(CommTcpProcesses, AHungRankTimesOut) {
  CliResult r = run_primus(launch(2, {"comm", "selftest", "--fault", "hang", "--fault-rank", "1"}),
                           {{"PRIMUS_COMM_TIMEOUT_S", "2"}});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 30);
  EXPECT_NE(r.err.find("[rank 0] ERROR: communicator watchdog: rank 0, group world, op all_reduce 'fault "
                       "injection' (seq 2) timed out after 2 s"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("primus launch: failed: rank 0 exited with code 1"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace primus::cli_test
