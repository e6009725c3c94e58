// Megatron-dialect keys of the training loop: batch and schedule, optimizer, learning-rate schedule,
// precision, activation recomputation and data (Primus trainer_base.yaml, pre_trainer.yaml).
#include "config/key_builders.h"
#include "config/key_reasons.h"
#include "config/keys_megatron.h"

namespace primus::config::keys {

void add_megatron_training_keys(KeyTable& t) {
  t.group("training");
  t.add(impl("train_iters", kI, "null", "optimizer steps to run").check(positive()));
  t.add(unsup("train_samples", kI, "null", "train for a number of samples instead of iterations"));
  t.add(impl("micro_batch_size", kI, "1", "sequences per micro-batch per data-parallel rank")
            .non_null()
            .check(positive()));
  t.add(impl("global_batch_size", kI, "null", "sequences per optimizer step (null: micro_batch_size x DP)")
            .check(positive()));
  t.add(noeff("batch_size", kI, "null", kWhyDeprecated, "old name of micro_batch_size"));
  t.add(unsup("rampup_batch_size", kL, "null", "batch-size ramp-up: [start, increment, samples]"));
  t.add(noeff("decrease_batch_size_if_needed", kB, "false", kWhyResilience,
              "shrink the batch when data-parallel ranks drop out"));
  t.add(impl("seq_length", kI, "null", "tokens per training sequence").check(positive()));
  t.add(noeff("encoder_seq_length", kI, "null", kWhyOtherModel, "encoder sequence length"));
  t.add(noeff("decoder_seq_length", kI, "null", kWhyOtherModel, "decoder sequence length"));
  t.add(
      impl("seed", kI, "1234", "random seed (initialisation, data order)").non_null().check(non_negative()));
  t.add(impl("deterministic_mode", kB, "false",
             "bitwise reproducible GPU runs (cuDNN's deterministic attention backward; slower)"));
  t.add(impl("make_vocab_size_divisible_by", kI, "128", "pad the vocabulary to a multiple of this (x TP)")
            .non_null()
            .check(positive()));
  t.add(
      unsup("calculate_per_token_loss", kB, "false", "average the loss over all tokens of the global batch"));
  t.add(impl("check_for_nan_in_loss_and_grad", kB, "true",
             "check the loss and gradients for NaN/Inf every step (policy: nan_policy)"));
  t.add(impl("check_for_spiky_loss", kB, "false",
             "detect loss spikes (>= spiky_loss_factor x recent losses; policy: spiky_loss_policy)"));
  t.add(noeff("check_for_large_grads", kB, "false", kWhyResilience, "detect large gradients"));
  t.add(noeff("exit_signal_handler", kB, "false",
              "Primus-C++ always handles SIGTERM/SIGINT: finish the step, save, exit 0 (docs/checkpoints.md)",
              "save and exit on SIGTERM"));
  t.add(
      noeff("onnx_safe", kB, "null", "ONNX export switch; Primus-C++ does not export ONNX", "ONNX-safe ops"));
  t.add(noeff("test_mode", kB, "false", "Megatron self-test switch", "Megatron test mode"));
  t.add(unsup("skip_train", kB, "false", "only evaluate, do not train"));
  t.add(noeff("adlr_autoresume", kB, "false", kWhyResilience, "ADLR auto-resume"));
  t.add(noeff("adlr_autoresume_interval", kI, "1000", kWhyResilience, "ADLR auto-resume check interval"));
  t.add(unsup("iterations_to_skip", kL, "null", "iterations whose batches are skipped"));
  t.add(noeff("enable_experimental", kB, "false", "gate of Megatron's experimental code paths; none here",
              "enable experimental features"));

  t.group("optimizer");
  t.add(impl("optimizer", kS, "adam", "optimizer: adam (AdamW: decoupled weight decay) | sgd | muon")
            .non_null()
            .supports(strings({"adam"}), "only adam (AdamW) is implemented"));
  t.add(impl("lr", kF, "null", "peak learning rate").check(non_negative()));
  t.add(impl("min_lr", kF, "0.0", "learning rate at the end of the decay").non_null().check(non_negative()));
  t.add(impl("lr_decay_style", kS, "linear", "constant | linear | cosine | WSD (| inverse-square-root)")
            .non_null()
            .check(one_of({"constant", "linear", "cosine", "inverse-square-root", "WSD"}))
            .supports(strings({"constant", "linear", "cosine", "WSD"}),
                      "constant, linear, cosine and WSD are implemented"));
  t.add(impl("lr_decay_iters", kI, "null", "iterations of the decay (null: train_iters)").check(positive()));
  t.add(unsup("lr_decay_samples", kI, "null", "decay length in samples"));
  t.add(impl("lr_warmup_iters", kI, "0", "linear warm-up iterations").non_null().check(non_negative()));
  t.add(impl("lr_warmup_fraction", kF, "null", "warm-up as a fraction of lr_decay_iters")
            .check(in_range(0, 1)));
  t.add(unsup("lr_warmup_samples", kI, "0", "warm-up length in samples"));
  t.add(unsup("lr_warmup_init", kF, "0.0", "learning rate at the start of the warm-up"));
  t.add(impl("lr_wsd_decay_style", kS, "exponential", "WSD: the anneal's shape")
            .non_null()
            .check(one_of({"exponential", "linear", "cosine", "minus_sqrt"})));
  t.add(unsup("lr_wsd_decay_samples", kI, "null", "WSD: the anneal's length in samples"));
  t.add(impl("lr_wsd_decay_iters", kI, "null", "WSD: the anneal's iterations, the last before lr_decay_iters")
            .check(positive()));
  t.add(unsup("head_lr_mult", kF, "1.0", "learning-rate multiplier of the output layer", null_or_number(1.0),
              "null or 1.0"));
  t.add(unsup("decoupled_lr", kF, "null", "separate learning rate of the input/output layers"));
  t.add(unsup("decoupled_min_lr", kF, "null", "separate minimum learning rate of the input/output layers"));
  t.add(noeff("warmup", kF, "null", kWhyDeprecated, "old warm-up fraction"));
  t.add(impl("weight_decay", kF, "0.01", "decoupled weight decay").non_null().check(non_negative()));
  t.add(unsup("start_weight_decay", kF, "null", "weight decay at the start of a schedule"));
  t.add(unsup("end_weight_decay", kF, "null", "weight decay at the end of a schedule"));
  t.add(unsup("weight_decay_incr_style", kS, "constant", "weight-decay schedule", strings({"constant"}),
              "only constant"));
  t.add(impl("clip_grad", kF, "1.0", "clip the global gradient norm to this (0: off)")
            .non_null()
            .check(non_negative()));
  t.add(impl("adam_beta1", kF, "0.9", "Adam beta1").non_null().check(in_range(0, 1)));
  t.add(impl("adam_beta2", kF, "0.999", "Adam beta2").non_null().check(in_range(0, 1)));
  t.add(impl("adam_eps", kF, "1.0e-8", "Adam epsilon").non_null().check(positive()));
  t.add(noeff("sgd_momentum", kF, "0.9", kWhyOptOther, "SGD momentum"));
  t.add(noeff("muon_extra_scale_factor", kF, "1.0", kWhyOptOther, "Muon extra scale"));
  t.add(noeff("muon_scale_mode", kS, "spectral", kWhyOptOther, "Muon scale mode"));
  t.add(noeff("muon_fp32_matmul_prec", kS, "medium", kWhyOptOther, "Muon matmul precision"));
  t.add(noeff("muon_num_ns_steps", kI, "5", kWhyOptOther, "Muon Newton-Schulz steps"));
  t.add(noeff("muon_tp_mode", kS, "blockwise", kWhyOptOther, "Muon TP mode"));
  t.add(noeff("muon_use_nesterov", kB, "false", kWhyOptOther, "Muon Nesterov momentum"));
  t.add(noeff("muon_split_qkv", kB, "true", kWhyOptOther, "Muon per-q/k/v orthogonalisation"));
  t.add(noeff("muon_momentum", kF, "0.95", kWhyOptOther, "Muon momentum"));
  t.add(noeff("override_opt_param_scheduler", kB, "false",
              "on resume the schedule always comes from this configuration",
              "ignore the checkpoint's schedule"));
  t.add(unsup("use_checkpoint_opt_param_scheduler", kB, "false", "take the schedule from the checkpoint"));
  // The precision-aware optimizer (Megatron's, TransformerEngine's FusedAdam): optimizer state in a narrower
  // dtype. The dtypes below must stay fp32 without it (Megatron asserts the same).
  t.add(impl("use_precision_aware_optimizer", kB, "false",
             "optimizer state in the dtypes below (exp_avg_dtype, exp_avg_sq_dtype: bf16 saves 4 bytes per "
             "parameter)")
            .non_null());
  t.add(impl("main_grads_dtype", kS, "fp32",
             "gradient dtype: fp32 | bf16; gradients are kept and reduced in fp32 here either way (bf16 is "
             "accepted with a warning)")
            .non_null()
            .check(one_of({"fp32", "bf16"})));
  t.add(impl("main_params_dtype", kS, "fp32", "master-weight dtype: fp32 | fp16")
            .non_null()
            .check(one_of({"fp32", "fp16"}))
            .supports(strings({"fp32"}), "fp32 master weights only"));
  t.add(impl("exp_avg_dtype", kS, "fp32", "Adam first moment dtype: fp32 | bf16 (| fp16 | fp8)")
            .non_null()
            .check(one_of({"fp32", "fp16", "bf16", "fp8"}))
            .supports(strings({"fp32", "bf16"}), "fp32 and bf16 moments"));
  t.add(impl("exp_avg_sq_dtype", kS, "fp32", "Adam second moment dtype: fp32 | bf16 (| fp16 | fp8)")
            .non_null()
            .check(one_of({"fp32", "fp16", "bf16", "fp8"}))
            .supports(strings({"fp32", "bf16"}), "fp32 and bf16 moments"));

  t.group("precision");
  t.add(impl("bf16", kB, "false", "BF16 compute with fp32 master weights (GPU; the CPU computes in fp32)"));
  t.add(unsup("fp16", kB, "false", "FP16 compute with loss scaling"));
  t.add(impl("fp8", kS, "null", "FP8 GEMMs of the decoder projections: e4m3 | hybrid (E5M2 gradients)")
            .check(one_of({"e4m3", "hybrid"})));
  t.add(unsup("fp4", kS, "null", "FP4 GEMMs: e2m1"));
  t.add(noeff("accumulate_allreduce_grads_in_fp32", kB, "false",
              "gradients are always accumulated in fp32 here", "fp32 gradient accumulation"));
  t.add(noeff("loss_scale", kF, "null", kWhyFp16, "static fp16 loss scale (null: dynamic)"));
  t.add(noeff("min_loss_scale", kF, "1.0", kWhyFp16, "smallest dynamic loss scale"));
  t.add(noeff("initial_loss_scale", kF, "4294967296", kWhyFp16, "initial dynamic loss scale"));
  t.add(noeff("loss_scale_window", kF, "1000", kWhyFp16, "loss-scale growth window"));
  t.add(noeff("hysteresis", kI, "2", kWhyFp16, "loss-scale hysteresis"));
  t.add(noeff("fp16_lm_cross_entropy", kB, "false", kWhyFp16, "cross-entropy in fp16"));
  // FP8 (docs/fp8.md; model/fp8_linear.h).
  t.add(impl("fp8_recipe", kS, "delayed",
             "FP8 scaling: delayed | tensorwise (current) | rowwise (Primus-C++) | blockwise; mxfp8 needs "
             "Blackwell")
            .check(one_of({"delayed", "tensorwise", "rowwise", "blockwise", "mxfp8", "custom"}))
            .supports(strings({"delayed", "tensorwise", "rowwise", "blockwise"}),
                      "delayed, tensorwise, rowwise and blockwise run on Hopper; mxfp8 needs Blackwell's "
                      "MX tensor cores (Hopper has none) and custom needs a quantizer factory"));
  t.add(impl("fp8_margin", kI, "0", "delayed scaling: scale = fp8_max / amax / 2^margin")
            .check(non_negative()));
  t.add(impl("fp8_amax_history_len", kI, "1024", "delayed scaling: amax history length").check(positive()));
  t.add(impl("fp8_amax_compute_algo", kS, "max", "delayed scaling: amax over the history: max | most_recent")
            .check(one_of({"max", "most_recent"})));
  t.add(impl("fp8_wgrad", kB, "true", "weight-gradient GEMMs in FP8 (false: BF16)"));
  t.add(impl("fp8_output_layer", kB, "false",
             "Primus-C++: the output layer's GEMMs in FP8 too (Megatron keeps it BF16, the default)"));
  t.add(impl("first_last_layers_bf16", kB, "false", "keep the first/last decoder layers in BF16"));
  t.add(impl("num_layers_at_start_in_bf16", kI, "1", "with first_last_layers_bf16: BF16 layers at the start")
            .check(non_negative()));
  t.add(impl("num_layers_at_end_in_bf16", kI, "1", "with first_last_layers_bf16: BF16 layers at the end")
            .check(non_negative()));
  t.add(noeff("fp8_interval", kI, "1", "deprecated in Megatron: scales are updated every step here",
              "FP8 scale update interval (deprecated)"));
  t.add(unsup("fp8_param_gather", kB, "false", "gather parameters in FP8"));
  add_all(
      t, "no FP8 weight copy outlives a step here: each micro-batch casts the BF16 weights it uses",
      {{"no_fp8_weight_transpose_cache", kB, "false", "Primus: no FP8 weight-transpose cache"},
       {"keep_fp8_transpose_cache_when_using_custom_fsdp", kB, "false", "FP8 transpose cache with FSDP"}});
  static const Knob kFp4[] = {
      {"fp4_recipe", kS, "nvfp4", "FP4 recipe: nvfp4 | mxfp4"},
      {"fp4_param", kB, "false", "FP4 parameters"},
      {"mxfp4_gradient_stochastic_rounding", kB, "false", "Primus-Turbo MXFP4 stochastic rounding"},
      {"weight_deosc", kB, "false", "Primus MXFP4 weight de-oscillation"},
      {"weight_deosc_period", kI, "200", "de-oscillation window"},
      {"weight_deosc_ratio", kF, "4.0", "de-oscillation threshold"},
      {"weight_deosc_start_step", kI, "0", "de-oscillation start step"},
      {"weight_deosc_log_freq", kI, "0", "de-oscillation log period"},
  };
  for (const Knob& k : kFp4) t.add(noeff(k.name, k.type, k.def, kWhyFp4, k.doc));
  t.add(noeff("te_rng_tracker", kB, "false", kWhyTE, "Transformer Engine RNG tracker"));
  t.add(noeff("inference_rng_tracker", kB, "false", kWhyInference, "inference RNG tracker"));

  t.group("recompute");
  t.add(
      impl("recompute_activations", kB, "false", "selective recomputation (same as granularity selective)"));
  t.add(impl("recompute_granularity", kS, "null", "activation recomputation: full | selective")
            .check(one_of({"full", "selective"})));
  t.add(impl("recompute_method", kS, "null", "full recomputation: uniform | block")
            .check(one_of({"uniform", "block"})));
  t.add(impl("recompute_num_layers", kI, "null", "layers per recompute group (uniform) or recomputed (block)")
            .check(non_negative()));
  t.add(impl("recompute_layer_ids", kA, "null",
             "Primus: recompute exactly these layers (a list, or a comma-separated string as Primus's "
             "DeepSeek-V4 / Kimi-K3 examples write it)")
            .check(layer_id_list()));
  t.add(noeff("checkpoint_activations", kB, "false", kWhyDeprecated, "old name of recompute_activations"));

  t.group("data");
  t.add(impl("mock_data", kB, "false", "synthetic random tokens instead of a dataset"));
  t.add(impl(
      "data_path", kA, "null",
      "Megatron indexed dataset prefixes (.bin/.idx), optionally weighted: [w1, p1, w2, p2] or a string"));
  t.add(impl("split", kS, "null", "train/valid/test split weights (null: 969,30,1)"));
  t.add(noeff("num_workers", kI, "2",
              "one loader thread assembles batches from the memory-mapped dataset, 4 ahead of the step; "
              "there is no per-sample Python work for worker processes to parallelise",
              "data-loader worker processes")
            .check(non_negative()));
  t.add(impl("eod_mask_loss", kB, "false", "no loss on end-of-document tokens"));
  t.add(impl("train_data_path", kA, "null", "training dataset blend (instead of data_path + split)"));
  t.add(impl("valid_data_path", kA, "null", "validation dataset blend (instead of data_path + split)"));
  t.add(impl("test_data_path", kA, "null", "test dataset blend (instead of data_path + split)"));
  t.add(unsup("data_args_path", kS, "null", "file holding data_path"));
  t.add(unsup("per_split_data_args_path", kS, "null", "file holding per-split data paths"));
  t.add(unsup("reset_position_ids", kB, "false", "restart positions after end-of-document"));
  t.add(unsup("reset_attention_mask", kB, "false", "block attention across documents"));
  t.add(impl("data_cache_path", kS, "null",
             "directory of the sample-index caches (null: <dataset dir>/cache/GPTDataset_indices)"));
  t.add(noeff("dataloader_type", kS, "null", kWhyData, "single | cyclic | external"));
  t.add(noeff("dataloader_mp_context", kS, "null", kWhyTorch, "PyTorch worker start method"));
  t.add(noeff("data_sharding", kB, "true", kWhyData, "shard the dataset over workers"));
  t.add(noeff("mmap_bin_files", kB, "true", kWhyData, "memory-map the .bin files"));
  t.add(noeff("num_dataset_builder_threads", kI, "1", kWhyData, "dataset index builder threads"));
  t.add(noeff("create_attention_mask_in_dataloader", kB, "true", "the causal mask is built into attention",
              "materialise the attention mask"));
  t.add(noeff("sample_rate", kF, "1.0", kWhyOtherModel, "sampling rate of BERT-style data"));
  t.add(noeff("mask_prob", kF, "0.15", kWhyOtherModel, "BERT masking probability"));
  t.add(noeff("short_seq_prob", kF, "0.1", kWhyOtherModel, "BERT short-sequence probability"));
  t.add(section("mock_dataset", "synthetic dataset class for non-GPT models (Primus)"));
  t.add(noeff("mock_dataset.class", kS, "null",
              "used only for non-GPT synthetic datasets; GPT mock data is built in", "mock dataset class"));
  t.add(noeff("mock_dataset.params", kM, "{}",
              "used only for non-GPT synthetic datasets; GPT mock data is built in",
              "mock dataset constructor arguments"));

  t.group("evaluation");
  t.add(impl("eval_iters", kI, "100", "validation batches per evaluation").non_null().check(non_negative()));
  t.add(impl("eval_interval", kI, "1000", "evaluate every this many iterations (0: never)")
            .check(non_negative()));
  t.add(unsup("full_validation", kB, "false", "validate on the whole validation set"));
  t.add(unsup("multiple_validation_sets", kB, "false", "several validation datasets"));
}

}  // namespace primus::config::keys
