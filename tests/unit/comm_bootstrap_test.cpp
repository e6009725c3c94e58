// Launch-environment resolution (comm/bootstrap.h): every source, the precedence between them, Slurm node
// lists, and the named errors.
#include <gtest/gtest.h>

#include <map>

#include "comm/bootstrap.h"
#include "core/error.h"

namespace primus::comm {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(CommBootstrap, SingleProcessWithoutVariables) {
  LaunchEnv e = resolve_launch_env(env_of({}));
  EXPECT_EQ(e.source, "single");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
}

TEST(CommBootstrap, Torchrun) {
  LaunchEnv e = resolve_launch_env(env_of({{"RANK", "5"},
                                           {"WORLD_SIZE", "8"},
                                           {"LOCAL_RANK", "1"},
                                           {"LOCAL_WORLD_SIZE", "4"},
                                           {"GROUP_RANK", "1"},
                                           {"MASTER_ADDR", "node0"},
                                           {"MASTER_PORT", "29600"}}));
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.nnodes, 2);
  EXPECT_EQ(e.master_addr, "node0");
  EXPECT_EQ(e.master_port, 29600);
  EXPECT_NE(e.describe().find("torchrun"), std::string::npos);
}

TEST(CommBootstrap, OpenMpi) {
  LaunchEnv e = resolve_launch_env(env_of({{"OMPI_COMM_WORLD_RANK", "3"},
                                           {"OMPI_COMM_WORLD_SIZE", "4"},
                                           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                           {"OMPI_COMM_WORLD_NODE_RANK", "1"}}));
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.nnodes, 2);
}

TEST(CommBootstrap, Pmi) {
  LaunchEnv e = resolve_launch_env(
      env_of({{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "2"}}));
  EXPECT_EQ(e.source, "pmi");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.node_rank, 1);
}

TEST(CommBootstrap, SlurmUsesFirstHostOfCompressedNodeList) {
  LaunchEnv e = resolve_launch_env(env_of({{"SLURM_PROCID", "9"},
                                           {"SLURM_NTASKS", "16"},
                                           {"SLURM_LOCALID", "1"},
                                           {"SLURM_NTASKS_PER_NODE", "8(x2)"},
                                           {"SLURM_NODEID", "1"},
                                           {"SLURM_NNODES", "2"},
                                           {"SLURM_JOB_NODELIST", "gpu[07-08]"},
                                           {"SLURM_JOB_ID", "123456"}}));
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 9);
  EXPECT_EQ(e.world_size, 16);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 8);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.master_addr, "gpu07");
  EXPECT_EQ(e.master_port, 20000 + 123456 % 10000);
}

TEST(CommBootstrap, PrimusVariables) {
  LaunchEnv e = resolve_launch_env(
      env_of({{"NNODES", "2"}, {"NODE_RANK", "1"}, {"GPUS_PER_NODE", "8"}, {"LOCAL_RANK", "3"}}));
  EXPECT_EQ(e.source, "primus");
  EXPECT_EQ(e.rank, 11);
  EXPECT_EQ(e.world_size, 16);
  EXPECT_EQ(e.master_addr, "localhost");
  EXPECT_EQ(e.master_port, 1234);
}

TEST(CommBootstrap, PrecedenceTorchrunOverOpenMpiOverSlurm) {
  std::map<std::string, std::string> v = {{"SLURM_PROCID", "0"},
                                          {"SLURM_NTASKS", "1"},
                                          {"OMPI_COMM_WORLD_RANK", "1"},
                                          {"OMPI_COMM_WORLD_SIZE", "2"}};
  EXPECT_EQ(resolve_launch_env(env_of(v)).source, "openmpi");
  v["RANK"] = "0";
  v["WORLD_SIZE"] = "2";
  EXPECT_EQ(resolve_launch_env(env_of(v)).source, "torchrun");
  ExplicitLaunch ex;
  ex.rank = 1;
  ex.world_size = 2;
  LaunchEnv e = resolve_launch_env(env_of(v), ex);
  EXPECT_EQ(e.source, "explicit");
  EXPECT_EQ(e.rank, 1);
}

TEST(CommBootstrap, MasterVariablesOverrideTheSource) {
  LaunchEnv e = resolve_launch_env(env_of({{"SLURM_PROCID", "0"},
                                           {"SLURM_NTASKS", "2"},
                                           {"SLURM_JOB_NODELIST", "a[1-2]"},
                                           {"MASTER_ADDR", "b9"},
                                           {"MASTER_PORT", "4000"}}));
  EXPECT_EQ(e.master_addr, "b9");
  EXPECT_EQ(e.master_port, 4000);
}

TEST(CommBootstrap, NamedErrors) {
  try {
    resolve_launch_env(env_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}}));
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 4 is outside the world of 4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("torchrun"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve_launch_env(env_of({{"RANK", "x"}, {"WORLD_SIZE", "4"}})), ConfigError);
  EXPECT_THROW(resolve_launch_env(env_of(
                   {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}})),
               ConfigError);
  EXPECT_THROW(resolve_launch_env(env_of({{"MASTER_PORT", "70000"}})), ConfigError);
}

TEST(CommBootstrap, SlurmNodeListExpansion) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_slurm_nodelist("gpu[01-04,07]"), (V{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07"}));
  EXPECT_EQ(expand_slurm_nodelist("node1"), (V{"node1"}));
  EXPECT_EQ(expand_slurm_nodelist("a[1-2],b3,c[08-10]"), (V{"a1", "a2", "b3", "c08", "c09", "c10"}));
  EXPECT_EQ(expand_slurm_nodelist("r[1-2]n[3-4]"), (V{"r1n3", "r1n4", "r2n3", "r2n4"}));
  EXPECT_EQ(expand_slurm_nodelist("x-gpu[9-11]-ib"), (V{"x-gpu9-ib", "x-gpu10-ib", "x-gpu11-ib"}));
  EXPECT_THROW(expand_slurm_nodelist("gpu[01-04"), ConfigError);
  EXPECT_THROW(expand_slurm_nodelist("gpu[4-1]"), ConfigError);
  EXPECT_THROW(expand_slurm_nodelist("gpu[a-b]"), ConfigError);
  EXPECT_EQ(first_slurm_count("8(x2),4"), 8);
}

}  // namespace
}  // namespace primus::comm
