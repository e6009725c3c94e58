// Where the input embedding's gradient is held row-sparse (train/sparse_embedding.h), and a store laid out
// that way (model/param_store.h): no dense gradient for region 0, a clear error for its dense view, zeroing
// that clears the slots.
#include "train/sparse_embedding.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "core/error.h"
#include "model/param_store.h"

using namespace primus;

namespace {

struct EnvVar {
  std::string name;
  EnvVar(const char* n, const char* value) : name(n) {
    if (value) {
      setenv(n, value, 1);
    } else {
      unsetenv(n);
    }
  }
  ~EnvVar() { unsetenv(name.c_str()); }
};

// Llama-3-8B's embedding with a one-GPU step of T 8,192.
TrainConfig llama8b_step() {
  TrainConfig c;
  c.model.vocab_size = 128256;
  c.model.padded_vocab_size = 128256;
  c.model.hidden_size = 4096;
  c.model.num_layers = 1;
  c.model.num_attention_heads = 32;
  c.model.ffn_hidden_size = 14336;
  c.model.untie_embeddings_and_output_weights = true;
  c.data.seq_length = 8192;
  c.micro_batch_size = 1;
  c.global_batch_size = 1;
  return c;
}

}  // namespace

TEST(SparseEmbedding, OneProcessUntiedTakesOneSlotPerTokenOfTheStep) {
  EnvVar env("PRIMUS_SPARSE_EMBEDDING_GRAD", nullptr);
  TrainConfig c = llama8b_step();
  EXPECT_EQ(sparse_embedding_rows(c, 1), 8192);
  c.global_batch_size = 4;  // four micro-batches accumulate into one gradient
  EXPECT_EQ(sparse_embedding_rows(c, 1), 4 * 8192);
  c.model.mtp_num_layers = 1;  // the MTP depth looks up shifted tokens: up to twice the rows
  c.global_batch_size = 2;
  EXPECT_EQ(sparse_embedding_rows(c, 1), 2 * 2 * 8192);
  c.global_batch_size = 4;  // 65,536 slots would take more than half the dense gradient: dense
  EXPECT_EQ(sparse_embedding_rows(c, 1), 0);
}

TEST(SparseEmbedding, DenseWhereTheGradientIsSharedSplitTiedOrFrozen) {
  EnvVar env("PRIMUS_SPARSE_EMBEDDING_GRAD", nullptr);
  const TrainConfig base = llama8b_step();
  {
    EnvVar emulate("PRIMUS_DP_EMULATE", "2");
    EXPECT_EQ(sparse_embedding_rows(base, 1), 0) << "one process emulating DP 2 sums dense gradients";
  }
  auto with = [&](auto&& edit) {
    TrainConfig c = base;
    edit(c);
    return sparse_embedding_rows(c, 1);
  };
  EXPECT_EQ(with([](TrainConfig& c) { c.parallel.tensor_model_parallel_size = 2; }), 0);
  EXPECT_EQ(with([](TrainConfig& c) { c.parallel.pipeline_model_parallel_size = 2; }), 0);
  EXPECT_EQ(with([](TrainConfig& c) { c.parallel.context_parallel_size = 2; }), 0);
  EXPECT_EQ(with([](TrainConfig& c) { c.parallel.expert_model_parallel_size = 2; }), 0);
  EXPECT_EQ(with([](TrainConfig& c) { c.parallel.use_distributed_optimizer = true; }), 0);
  EXPECT_EQ(with([](TrainConfig& c) { c.parallel.use_torch_fsdp2 = true; }), 0);
  EXPECT_EQ(with([](TrainConfig& c) { c.model.untie_embeddings_and_output_weights = false; }), 0);
  EXPECT_EQ(with([](TrainConfig& c) { c.lora.enabled = true; }), 0);
}

// DDP: every rank reserves the union of the ranks' rows of a step (parallel/data_parallel.h), so the
// capacity covers every rank's tokens; sharded state stays dense.
TEST(SparseEmbedding, DataParallelRanksHoldTheUnionOfTheirRows) {
  EnvVar env("PRIMUS_SPARSE_EMBEDDING_GRAD", nullptr);
  TrainConfig c = llama8b_step();
  c.global_batch_size = 2;
  EXPECT_EQ(sparse_embedding_rows(c, 2), 2 * 8192) << "DP 2, one micro-batch each";
  c.global_batch_size = 4;
  EXPECT_EQ(sparse_embedding_rows(c, 2), 4 * 8192) << "DP 2, two micro-batches each";
  c.global_batch_size = 8;  // 65,536 slots: more than half the dense gradient
  EXPECT_EQ(sparse_embedding_rows(c, 2), 0);
  c.global_batch_size = 4;
  c.parallel.use_distributed_optimizer = true;
  EXPECT_EQ(sparse_embedding_rows(c, 2), 0) << "ZeRO-1 reduce-scatters the dense gradient";
}

TEST(SparseEmbedding, AutoNeedsAtLeastHalfTheMemoryBackModesOverride) {
  TrainConfig c = llama8b_step();
  c.model.vocab_size = c.model.padded_vocab_size = 264;  // a byte vocabulary: every row is touched
  c.model.hidden_size = 64;
  c.data.seq_length = 128;
  {
    EnvVar env("PRIMUS_SPARSE_EMBEDDING_GRAD", nullptr);
    EXPECT_EQ(sparse_embedding_rows(c, 1), 0);
  }
  {
    EnvVar env("PRIMUS_SPARSE_EMBEDDING_GRAD", "2");
    EXPECT_EQ(sparse_embedding_rows(c, 1), 128);
  }
  {
    EnvVar env("PRIMUS_SPARSE_EMBEDDING_GRAD", "0");
    EXPECT_EQ(sparse_embedding_rows(llama8b_step(), 1), 0);
  }
  {
    EnvVar env("PRIMUS_SPARSE_EMBEDDING_GRAD", "3");
    EXPECT_THROW(sparse_embedding_rows(c, 1), ConfigError);
  }
}

TEST(SparseEmbedding, StoreHasNoDenseGradientForTheEmbedding) {
  ModelSpec spec;
  spec.layers = 1;
  spec.hidden = 16;
  spec.heads = 2;
  spec.kv_heads = 2;
  spec.head_dim = 8;
  spec.ffn = 32;
  spec.vocab = 50;
  spec.tied_embeddings = false;
  ParamStore dense(spec), sparse(spec);
  sparse.set_sparse_embedding_grad(20);
  dense.allocate(DType::kF32, Stream::cpu());
  sparse.allocate(DType::kF32, Stream::cpu());
  const int e = sparse.find("embed_tokens.weight");
  EXPECT_EQ(sparse.sparse_entry(), e);
  EXPECT_EQ(dense.sparse_entry(), -1);
  EXPECT_EQ(sparse.grad_base(), sparse.regions()[0].end);
  EXPECT_EQ(sparse.grad_flat().numel(), dense.grad_flat().numel() - sparse.regions()[0].end);
  EXPECT_EQ(sparse.sparse_grad().capacity(), 20);
  try {
    sparse.grad(e);
    ADD_FAILURE() << "no dense view expected";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("embed_tokens.weight': its gradient is row-sparse"),
              std::string::npos)
        << err.what();
  }
  // Every other entry's gradient is the same slice of the buffer as in the dense store.
  const int head = sparse.find("lm_head.weight");
  EXPECT_EQ(sparse.grad(head).data_ptr(),
            sparse.grad_span(sparse.entry(head).offset, sparse.entry(head).offset + 1).data_ptr());
  // Zeroing the step's gradients frees the slots.
  sparse.sparse_grad().count.data<int32_t>()[0] = 3;
  sparse.begin_grad_step(Stream::cpu());
  EXPECT_EQ(sparse.sparse_grad().count.data<int32_t>()[0], 0);
  // Only before allocation, and never for a sharded store.
  EXPECT_THROW(sparse.set_sparse_embedding_grad(20), Error);
  ParamStore sharded(spec, 2);
  sharded.set_sparse_embedding_grad(20);
  EXPECT_THROW(sharded.allocate_sharded(DType::kF32, Stream::cpu(), ShardMode::kOptimizer, 2, 0), Error);
}
