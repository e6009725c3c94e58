#pragma once
// The typed configuration every part of the trainer reads. Both key dialects (Megatron's flat keys and
// TorchTitan's sections) are mapped into this one struct by config/experiment.h; nothing downstream looks at
// raw YAML. Field names follow Megatron's key names where one exists.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace primus::parallel {
struct PipelinePlanInput;  // parallel/pipeline_projection.h
}

namespace primus {

// Mixture of experts (docs/moe.md; Megatron's num_experts and moe_* keys). num_experts == 0: a dense model.
struct MoeConfig {
  int64_t num_experts = 0;
  int64_t topk = 2;
  int64_t ffn_hidden_size = 0;             // per routed expert
  int64_t shared_ffn_hidden_size = 0;      // 0: no shared expert
  bool shared_expert_gate = false;         // Qwen2-MoE: shared output scaled by sigmoid(x . w_gate)
  std::vector<char> layer_is_moe;          // per layer (moe_layer_freq); dense layers use ffn_hidden_size
  std::string score_function = "softmax";  // softmax | sigmoid
  bool pre_softmax = false;
  bool normalize_topk = false;  // divide the k probabilities by their sum (Megatron: sigmoid with topk > 1)
  int64_t num_groups = 0, group_topk = 0;  // group-limited routing (0: none)
  double topk_scaling_factor = 1.0;
  bool expert_bias = false;
  double bias_update_rate = 1e-3;
  std::string load_balancing = "aux_loss";  // aux_loss | seq_aux_loss | none
  double aux_loss_coeff = 0.0;
  double z_loss_coeff = 0.0;
  // Grok-2's router_logit_softcapping: the router's logits become cap * tanh(z / cap) before anything reads
  // them (selection, scores, the balancing and z losses); 0: off.
  double router_softcap = 0.0;
  double capacity_factor = 0.0;  // 0: dropless
  bool pad_to_capacity = false;
  std::string drop_policy = "probs";  // probs | position
  bool per_layer_logging = false;
  // Forced load balancing, a benchmarking aid (docs/moe.md): none | even (Primus: round-robin dispatch, each
  // slot carrying the router's top-k weight) | uniform (Megatron: routing by random logits) | round_robin
  // (TorchTitan: round-robin dispatch weighted by the router's probabilities of those experts). A switch of
  // the run, not of the model: checkpoints do not record it.
  std::string force_balance = "none";
  bool enabled() const { return num_experts > 0; }
  bool is_moe_layer(int64_t layer) const {
    return enabled() && layer >= 0 && layer < static_cast<int64_t>(layer_is_moe.size()) &&
           layer_is_moe[static_cast<size_t>(layer)] != 0;
  }
  int64_t moe_layers() const {
    int64_t n = 0;
    for (char c : layer_is_moe) n += c != 0;
    return enabled() ? n : 0;
  }
};

// Multi-latent attention and YaRN (DeepSeek-V2/V3; docs/mla.md; Megatron's multi_latent_attention keys).
struct MlaConfig {
  bool enabled = false;
  int64_t q_lora_rank = 0;  // 0: q = x W_q^T (no low-rank query, DeepSeek-V2-Lite)
  int64_t kv_lora_rank = 512;
  int64_t qk_head_dim = 128;         // dn: per-head q/k dims without position (Megatron qk_head_dim)
  int64_t qk_pos_emb_head_dim = 64;  // dr: rotary dims, one k head shared by all heads
  int64_t v_head_dim = 128;
  // RoPE of the rotary slice: yarn (Megatron's default for MLA) or plain rope.
  bool yarn = true;
  double rotary_scaling_factor = 1.0;  // YaRN factor; also in the softmax scale m(factor, mscale_all_dim)^2
  int64_t original_max_position = 4096;
  double beta_fast = 32.0, beta_slow = 1.0;
  double mscale = 1.0, mscale_all_dim = 1.0;
};

struct ModelConfig {
  std::string name;              // preset name, e.g. "llama3.1_8B"
  std::string family = "llama";  // llama | qwen2 | qwen3 (informational; behaviour comes from the flags)
  int64_t num_layers = 2;
  int64_t hidden_size = 64;
  int64_t ffn_hidden_size = 256;
  int64_t num_attention_heads = 4;
  int64_t num_query_groups = 4;   // KV heads (= num_attention_heads when group_query_attention is off)
  int64_t kv_channels = 16;       // head dim (hidden_size / heads unless set)
  int64_t vocab_size = 0;         // tokenizer vocabulary (before padding)
  int64_t padded_vocab_size = 0;  // rounded up to make_vocab_size_divisible_by (x TP)
  // The embedding's and head's rows: the padded vocabulary once it is set, else the tokenizer's.
  int64_t vocab_rows() const { return padded_vocab_size > 0 ? padded_vocab_size : vocab_size; }
  int64_t make_vocab_size_divisible_by = 128;
  int64_t max_position_embeddings = 4096;
  bool untie_embeddings_and_output_weights = true;
  bool add_qkv_bias = false;     // Qwen 2
  bool add_bias_linear = false;  // not supported yet when true
  bool qk_layernorm = false;     // Qwen 3
  bool swiglu = true;
  std::string normalization = "RMSNorm";
  double norm_epsilon = 1e-5;
  double rotary_base = 10000.0;
  // Partial rotary (Megatron rotary_percent, HF partial_rotary_factor): RoPE rotates the first
  // floor(head_dim x rotary_percent) elements of each head (ModelSpec::rope_dim), the rest pass through.
  double rotary_percent = 1.0;
  // Grok-2's final_logit_softcapping: the output logits become cap * tanh(x / cap) before the loss; 0: off.
  double final_logit_softcap = 0.0;
  bool use_rope_scaling = false;  // Llama-3 frequency scaling
  double rope_scaling_factor = 8.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_position = 8192;
  double init_method_std = 0.02;
  MoeConfig moe;
  MlaConfig mla;
  // Multi-token prediction (DeepSeek-V3; docs/mla.md): mtp_num_layers extra depths, each predicting one token
  // further; their mean loss, scaled by mtp_loss_scaling_factor, is added to the LM loss.
  int64_t mtp_num_layers = 0;
  double mtp_loss_scaling_factor = 0.1;
};

struct OptimConfig {
  std::string optimizer = "adam";  // AdamW (decoupled weight decay), as Megatron's "adam"
  double lr = 1e-4;
  double min_lr = 0.0;
  int64_t lr_warmup_iters = 0;
  std::optional<int64_t> lr_decay_iters;  // null = train_iters
  std::string lr_decay_style = "cosine";  // constant | linear | cosine | WSD
  // WSD (warmup-stable-decay, Megatron's lr_wsd_*): the lr stays at its peak until the last
  // lr_wsd_decay_iters iterations before lr_decay_iters, which anneal it to min_lr in lr_wsd_decay_style
  // (exponential | linear | cosine | minus_sqrt).
  int64_t lr_wsd_decay_iters = 0;
  std::string lr_wsd_decay_style = "exponential";
  double weight_decay = 0.01;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double clip_grad = 1.0;  // 0 disables clipping
  // The Adam moments' storage (Megatron's precision-aware optimizer: exp_avg_dtype, exp_avg_sq_dtype): f32,
  // or bf16 (stored rounded, computed in f32; ParamStore::set_moment_dtypes).
  DType exp_avg_dtype = DType::kF32;
  DType exp_avg_sq_dtype = DType::kF32;
};

struct DataConfig {
  bool mock_data = false;
  std::vector<std::string> data_path;  // Megatron blend: "w1 p1 w2 p2" or prefixes
  std::vector<std::string> train_data_path, valid_data_path, test_data_path;  // per-split blends
  std::string data_cache_path;  // index caches ("": beside each dataset)
  std::string text_data_path;   // a text file or a directory of fortune-style files (byte tokens)
  std::string split = "969,30,1";
  std::string tokenizer_type = "ByteTokenizer";
  std::string tokenizer_model;
  std::string vocab_file, merge_file;  // GPT2BPETokenizer
  int64_t null_vocab_size = 0;         // NullTokenizer: the `vocab_size` key (ids 0..N-1, EOD N)
  int64_t seq_length = 128;
  bool eod_mask_loss = false;
};

struct ParallelConfig {
  int64_t tensor_model_parallel_size = 1;
  int64_t pipeline_model_parallel_size = 1;
  int64_t context_parallel_size = 1;
  int64_t expert_model_parallel_size = 1;
  int64_t data_parallel_replicate_degree = 1;  // HSDP replicas
  bool sequence_parallel = false;              // with TP > 1 only (Megatron turns it off at TP 1)
  bool tp_comm_overlap = false;      // async TP (with sequence parallelism; parallel/tensor_parallel.h)
  std::string cp_comm_type = "p2p";  // context parallelism's exchange (every value runs as all_gather)
  bool use_distributed_optimizer = false;
  bool use_torch_fsdp2 = false;
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  bool grad_reduce_in_bf16 = false;  // DDP: all-reduce gradients in bf16 (f32 accumulation on host backends)
  int64_t data_parallel_size = 1;    // WORLD_SIZE / (TP x PP x CP), set by the config loader
  // Distributed layer (src/parallel/parallel_dims.h maps these onto ParallelDims):
  int64_t data_parallel_shard_degree = -1;  // TorchTitan dp_shard; -1 = what the world leaves
  std::string data_parallel_sharding_strategy =
      "no_shard";                      // no_shard | optim | optim_grads | optim_grads_params
  double distributed_timeout_s = 600;  // distributed_timeout_minutes x 60 / comm.train_timeout_seconds
};

struct RecomputeConfig {
  std::string granularity;  // "" (off) | full | selective
  std::string method;       // uniform | block (full only)
  int64_t num_layers = 1;
  // Primus's recompute_layer_ids (full only, without a method): exactly these global layers recompute, sorted
  // and unique; multi-token-prediction depth k is layer num_layers + k.
  std::vector<int64_t> layer_ids;
};

struct CheckpointConfig {
  std::string save;           // directory; "" = no saving
  std::string load;           // directory or HF model dir; "" = none
  int64_t save_interval = 0;  // 0 = only at the end (when save is set)
  bool no_save_optim = false;
  bool no_save_rng = false;
  bool no_load_optim = false;
  bool no_load_rng = false;
  bool finetune = false;
  bool auto_continue_train = false;
  bool async_save = false;
  bool disable_last_saving = false;        // Primus: no checkpoint at the end of training
  bool exit_on_missing_checkpoint = true;  // `load` names no checkpoint: fail (true) or start fresh (false)
  int64_t keep_latest_k = 2;
  int64_t exit_interval = 0;
  double exit_duration_in_mins = 0;
};

// In-flight training guards (docs/checkpoints.md): non-finite loss/gradients and loss spikes.
struct GuardConfig {
  bool check_nan = true;                   // check_for_nan_in_loss_and_grad
  std::string nan_policy = "halt";         // halt (exit code 4) | skip (the update is not applied)
  bool check_spiky_loss = false;           // check_for_spiky_loss
  std::string spiky_loss_policy = "warn";  // warn | skip
  double spiky_loss_factor = 10.0;         // spike: loss >= factor x the max of the last 100 accepted losses
};

// TensorBoard event files (src/train/tensorboard_sink.h, docs/metrics.md).
struct TensorBoardConfig {
  bool enabled = false;
  std::string dir;                     // tensorboard_dir; "" = {run directory}/{subdir}
  std::string subdir = "tensorboard";  // Primus's layout; TorchTitan: metrics.save_tb_folder
  std::string tags = "megatron";       // tag names: megatron | torchtitan
  int64_t log_interval = 1;            // step scalars every this many iterations
  int64_t queue_size = 1000;           // records held before a write (also written every 120 s and at exit)
  bool learning_rate = true;           // log_learning_rate_to_tensorboard
  bool loss_scale = true;              // log_loss_scale_to_tensorboard (BF16: always 1)
  bool batch_size = false;             // log_batch_size_to_tensorboard
  bool world_size = false;             // log_world_size_to_tensorboard
  bool memory = false;                 // log_memory_to_tensorboard
  bool timers = false;                 // log_timers_to_tensorboard: iteration-time
  bool throughput = false;             // log_throughput: TFLOP/s, tokens/s, MFU (with timers, as Megatron)
  bool validation_ppl = false;         // log_validation_ppl_to_tensorboard
};

struct LoggingConfig {
  int64_t log_interval = 1;
  int64_t eval_interval = 0;  // 0 = no evaluation
  int64_t eval_iters = 0;
  TensorBoardConfig tensorboard;
};

// Profiling and in-flight monitors (src/profile, src/safe; docs/stability.md).
struct StabilityConfig {
  bool profile = false;  // profile: write a Chrome/Perfetto trace of iterations [start, end] per rank
  int64_t profile_step_start = 10;
  int64_t profile_step_end = 12;
  std::vector<int64_t> profile_ranks = {0};
  double hang_timeout_s = 0;        // 0: max(3 x p99 step time, 60 s); < 0: watchdog off
  double straggler_factor = 1.2;    // a rank whose step time >= factor x the median over ranks is flagged
  int64_t straggler_interval = 10;  // steps between straggler checks
};

// FP8 training (docs/fp8.md): the decoder projections' GEMMs in FP8 under one recipe. Megatron's fp8 /
// fp8_recipe / fp8_amax_* / first_last_layers_bf16 keys and TorchTitan's quantize.linear.float8 section map
// here; model/fp8_linear.h resolves it into the per-tensor formats and scale granularities.
struct Fp8Config {
  bool enabled = false;
  std::string format = "hybrid";          // e4m3 (every tensor) | hybrid (E4M3 forward, E5M2 gradients)
  std::string recipe = "delayed";         // delayed | tensorwise (current scaling) | rowwise | blockwise
  bool wgrad = true;                      // weight-gradient GEMMs in FP8 (false: BF16)
  int64_t amax_history_len = 1024;        // delayed scaling: amax history per tensor
  std::string amax_compute_algo = "max";  // delayed scaling: max | most_recent over the history
  int64_t margin = 0;                     // delayed scaling: scale = fp8_max / amax / 2^margin
  int64_t bf16_layers_at_start = 0;       // first_last_layers_bf16: these layers stay BF16
  int64_t bf16_layers_at_end = 0;
  std::vector<std::string> filter_fqns;  // TorchTitan: projections whose name contains one stay BF16
  bool output_layer = false;             // the output layer's GEMMs in FP8 too (TorchTitan: unless filtered)
  std::string source;                    // the keys that turned it on (for messages)
};

// Supervised fine-tuning (`primus train posttrain`, Primus's `stage: sft`; docs/posttrain.md): JSONL samples
// rendered through the model's chat template, the loss on the responses only.
struct SftConfig {
  bool enabled = false;  // stage: sft
  // sft_dataset_name: local JSONL files or directories of them, resolved when training starts (a directory's
  // <split>.jsonl, else its *.jsonl; its validation.jsonl / valid.jsonl gives the validation loss)
  std::vector<std::string> data;
  std::string split = "train";  // sft_dataset_split
  std::string format;  // sft_conversation_format: "" (per record) | alpaca | messages | prompt_response
  bool pack = false;   // enable_packed_sequences: several samples per row (first-fit-decreasing)
  // use_packed_attention: the samples of a row do not see each other and their positions restart
  bool packed_attention = false;
  // Rows carry per-token positions and sample starts the model must use.
  bool isolated_rows() const { return enabled && pack && packed_attention; }
};

// LoRA adapters (post-training; Primus's `lora:` section, docs/posttrain.md): every targeted projection
// y = x W^T becomes y = x W^T + (alpha / rank) (x A^T) B^T with A [rank, in], B [out, rank] trained and the
// whole base model frozen (no gradients, no optimizer state).
struct LoraConfig {
  bool enabled = false;
  int64_t rank = 32;  // lora.dim
  double alpha = 32;  // lora.alpha
  double dropout = 0;
  std::string a_init = "xavier";  // lora.lora_A_init_method: xavier | kaiming (B starts at zero)
  // Our projection names, in this order when present: qkv_proj, o_proj, gate_up_proj, down_proj (Primus's
  // linear_qkv, linear_proj, linear_fc1, linear_fc2).
  std::vector<std::string> targets;
  double scale() const { return alpha / static_cast<double>(rank); }
  bool targets_projection(const std::string& name) const {
    for (const std::string& t : targets)
      if (t == name) return true;
    return false;
  }
};

struct RunInfo {
  std::string work_group = "amd";
  std::string user_name = "root";
  std::string exp_name = "primus-run";
  std::string workspace = "./output";
  std::string framework = "megatron";  // megatron | torchtitan (key dialect)
  std::string config_file;             // the experiment file
  // {workspace}/{work_group}/{user_name}/{exp_name}, Primus's layout.
  std::string run_dir() const { return workspace + "/" + work_group + "/" + user_name + "/" + exp_name; }
};

struct TrainConfig {
  RunInfo run;
  ModelConfig model;
  OptimConfig optim;
  DataConfig data;
  ParallelConfig parallel;
  RecomputeConfig recompute;
  CheckpointConfig checkpoint;
  GuardConfig guards;
  LoggingConfig logging;
  StabilityConfig stability;
  int64_t train_iters = 100;
  int64_t micro_batch_size = 1;
  int64_t global_batch_size = 1;
  int64_t seed = 1234;
  bool bf16 = true;  // GPU compute precision; the CPU backend always computes in f32
  Fp8Config fp8;
  SftConfig sft;
  LoraConfig lora;
  std::string device = "auto";   // auto | cpu | cuda  (primus extension key `device`)
  std::string gemm_tuning_file;  // GEMM tuning cache (kernel issue)
  // deterministic_mode (Megatron) / debug.deterministic (TorchTitan): bitwise reproducible GPU runs.
  bool deterministic = false;
  // Pipeline parallelism: the split and schedule keys as the config loader read them (Megatron dialect;
  // parallel/pipeline_projection.h); null for TorchTitan configs.
  std::shared_ptr<const parallel::PipelinePlanInput> pipeline;
};

}  // namespace primus
