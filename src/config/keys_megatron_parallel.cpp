// Megatron-dialect keys of model and data parallelism and of the distributed runtime (Primus
// trainer_base.yaml, language_model.yaml). Pipeline and context degrees other than 1 are not supported yet
// (tensor and expert parallelism are); switches that only change how gradients and parameters travel
// (overlap, bucketing, ZeRO, FSDP) change nothing at world size 1.
#include "config/key_builders.h"
#include "config/key_reasons.h"
#include "config/keys_megatron.h"

namespace primus::config::keys {

void add_megatron_parallel_keys(KeyTable& t) {
  t.group("parallelism");
  t.add(
      impl("tensor_model_parallel_size", kI, "1",
           "tensor-parallel degree (TP): heads, ffn and vocabulary split over TP ranks (docs/parallelism.md)")
          .non_null()
          .check(positive()));
  t.add(impl(
      "sequence_parallel", kB, "false",
      "sequence parallelism: norms and residuals on 1/TP of the tokens (Megatron turns it off at TP = 1)"));
  t.add(impl("tp_comm_overlap", kB, "false",
             "async TP: the sequence-parallel all-gathers / reduce-scatters in slices under the projections' "
             "GEMMs (needs sequence_parallel)"));
  t.add(impl("pipeline_model_parallel_size", kI, "1",
             "pipeline-parallel degree (PP): the layers in stages over PP ranks, run by a schedule "
             "(docs/pipeline.md)")
            .non_null()
            .check(positive()));
  t.add(impl("context_parallel_size", kI, "1",
             "context-parallel degree (CP): each sequence split in 2·CP chunks over CP ranks "
             "(docs/parallelism.md)")
            .non_null()
            .check(positive()));
  t.add(
      impl("cp_comm_type", kA, "p2p",
           "context-parallel exchange: p2p | a2a | all_gather | a2a+p2p (every value runs as all_gather: the "
           "same math, no ring overlap yet)"));
  t.add(
      impl("expert_model_parallel_size", kI, "1",
           "expert-parallel degree (EP): each MoE layer's experts split over EP ranks (docs/parallelism.md)")
          .non_null()
          .check(positive()));
  t.add(impl("data_parallel_replicate_degree", kI, "1", "HSDP replica groups (with FSDP)").check(positive()));
  t.add(noeff("model_parallel_size", kI, "null", kWhyDeprecated, "old name of tensor_model_parallel_size"));
  t.add(noeff("encoder_tensor_model_parallel_size", kI, "0", kWhyOtherModel, "encoder TP degree"));
  t.add(noeff("encoder_pipeline_model_parallel_size", kI, "0", kWhyOtherModel, "encoder PP degree"));

  add_all(t, kWhyTP,
          {{"tp_comm_overlap_cfg", kS, "null", "TP overlap configuration file"},
           {"tp_comm_overlap_ag", kB, "true", "overlap TP all-gather"},
           {"tp_comm_overlap_rs", kB, "true", "overlap TP reduce-scatter"},
           {"tp_comm_overlap_rs_dgrad", kB, "false", "overlap reduce-scatter with dgrad"},
           {"tp_comm_split_ag", kB, "true", "split TP all-gather"},
           {"tp_comm_split_rs", kB, "true", "split TP reduce-scatter"},
           {"tp_comm_bulk_wgrad", kB, "true", "bulk overlap with wgrad"},
           {"tp_comm_bulk_dgrad", kB, "true", "bulk overlap with dgrad"},
           {"tp_comm_bootstrap_backend", kS, "nccl", "bootstrap backend of TP overlap"},
           {"async_tensor_model_parallel_allreduce", kB, "true", "asynchronous TP all-reduce"},
           {"distribute_saved_activations", kB, "false", "spread recomputation inputs over TP ranks"}});

  add_all(t, kWhyCP, {{"hierarchical_context_parallel_sizes", kL, "null", "hierarchical CP group sizes"}});

  // The pipeline split and schedule (docs/pipeline.md): read by parallel/pipeline_projection.cpp for the
  // runtime (parallel/pipeline_runtime.h) and the projection.
  t.add(
      impl("virtual_pipeline_model_parallel_size", kI, "null", "virtual pipeline stages (chunks) per rank"));
  t.add(impl("num_layers_per_virtual_pipeline_stage", kI, "null", "layers per virtual stage"));
  t.add(impl("num_virtual_stages_per_pipeline_rank", kI, "null", "virtual stages per rank (newer name)"));
  t.add(impl("microbatch_group_size_per_vp_stage", kI, "null",
             "interleaved: micro-batches per group (null: PP)"));
  t.add(impl("pipeline_model_parallel_layout", kA, "null",
             "explicit layer layout over stages (\"Et*3|(tt|)*29,m|L\")"));
  t.add(impl("decoder_first_pipeline_num_layers", kI, "null", "layers on the first stage"));
  t.add(impl("decoder_last_pipeline_num_layers", kI, "null", "layers on the last stage"));
  t.add(impl("decoder_pipeline_manual_split_list", kL, "null", "Primus: layers per stage"));
  t.add(impl("account_for_embedding_in_pipeline_split", kB, "false", "count the embedding as a layer"));
  t.add(impl("account_for_loss_in_pipeline_split", kB, "false", "count the loss as a layer"));
  t.add(impl("pipeline_schedule", kS, "null",
             "run this generated schedule (gpipe | 1f1b | interleaved | zb-h1 | zb-v) instead of the one "
             "Megatron's / Primus's keys select")
            .ext());
  add_all(t, kWhyPP,
          {{"pipeline_model_parallel_comm_backend", kS, "null", "PP communication backend: nccl | ucc"},
           {"pipeline_model_parallel_split_rank", kI, "null", "encoder/decoder split rank"},
           {"standalone_embedding_stage", kB, "false", "embedding on its own stage"},
           {"overlap_p2p_comm", kB, "true", "overlap pipeline send/recv"},
           {"scatter_gather_tensors_in_pipeline", kB, "true", "scatter/gather pipeline tensors over TP"},
           {"use_ring_exchange_p2p", kB, "false", "ring-exchange pipeline p2p"},
           {"defer_embedding_wgrad_compute", kB, "false", "defer the embedding wgrad (pipeline)"},
           {"wgrad_deferral_limit", kI, "0", "deferred wgrad micro-batches"},
           {"pp_warmup", kB, "false", "Primus: pipeline warm-up iteration"},
           {"dump_pp_data", kB, "false", "Primus: dump pipeline schedule data"}});

  // Data parallelism (docs/distributed.md): these select and tune what src/parallel/data_parallel.cpp does.
  t.add(impl("use_distributed_optimizer", kB, "false", "ZeRO-1: shard optimizer state over data parallel"));
  t.add(impl("use_torch_fsdp2", kB, "false", "FSDP: shard parameters, gradients and optimizer state"));
  t.add(impl("data_parallel_sharding_strategy", kS, "no_shard",
             "no_shard | optim | optim_grads | optim_grads_params"));
  t.add(impl("overlap_grad_reduce", kB, "false", "reduce each region's gradients while backward continues"));
  t.add(impl("overlap_param_gather", kB, "false", "FSDP: gather the next region's parameters ahead of use"));
  t.add(impl("grad_reduce_in_bf16", kB, "false", "reduce gradients in bf16 (halves the traffic)"));
  t.add(impl("distributed_timeout_minutes", kI, "10", "collective timeout (the hang watchdog's limit)")
            .check(positive()));
  add_all(t, kWhyDpKnob,
          {{"use_megatron_fsdp", kB, "false", "Megatron FSDP"},
           {"use_custom_fsdp", kB, "false", "Megatron custom FSDP (old name)"},
           {"overlap_param_gather_with_optimizer_step", kB, "false", "overlap param gather with the step"},
           {"align_grad_reduce", kB, "true", "launch gradient reduction of all stages together"},
           {"align_param_gather", kB, "true", "launch parameter gathers of all stages together"},
           {"ddp_num_buckets", kI, "null", "gradient buckets"},
           {"ddp_bucket_size", kI, "null", "gradient bucket size"},
           {"ddp_pad_buckets_for_high_nccl_busbw", kB, "false", "pad buckets for NCCL bandwidth"},
           {"ddp_average_in_collective", kB, "false", "average inside the collective"},
           {"gradient_reduce_div_fusion", kB, "true", "fuse the gradient division into the reduction"},
           {"suggested_communication_unit_size", kI, "400000000", "FSDP communication unit"},
           {"num_distributed_optimizer_instances", kI, "1", "distributed-optimizer replicas"},
           {"data_parallel_random_init", kB, "false", "different initialisation per DP rank"},
           {"use_sharp", kB, "false", "SHARP in-network reductions"},
           {"sharp_enabled_group", kS, "null", "group using SHARP: dp | dp_replica"},
           {"nccl_communicator_config_path", kS, "null", "NCCL communicator config file"},
           {"use_tp_pp_dp_mapping", kB, "false", "tp-pp-dp rank order"},
           {"high_priority_stream_groups", kL, "[]", "groups on high-priority streams"},
           {"check_weight_hash_across_dp_replicas_interval", kI, "null", "check DP replicas agree"},
           {"distributed_backend", kS, "nccl", "torch.distributed backend"},
           {"enable_gloo_process_groups", kB, "true", "create Gloo groups as well"}});

  add_all(t, kWhyLauncher,
          {{"local_rank", kI, "null", "local rank (set by the launcher)"},
           {"lazy_mpu_init", kB, "null", "defer model-parallel initialisation"}});

  add_all(t, kWhyOffload,
          {{"optimizer_cpu_offload", kB, "false", "optimizer state on the CPU"},
           {"optimizer_offload_fraction", kF, "1.0", "fraction of the optimizer offloaded"},
           {"use_torch_optimizer_for_cpu_offload", kB, "false", "torch optimizer for offloaded state"},
           {"overlap_cpu_optimizer_d2h_h2d", kB, "false", "overlap offload copies"},
           {"pin_cpu_grads", kB, "true", "pinned host gradients"},
           {"pin_cpu_params", kB, "true", "pinned host parameters"},
           {"cpu_offload", kB, "false", "activation offload to the CPU"},
           {"offload", kB, "false", "Primus pipeline offload"},
           {"offload_ops", kS, "", "Primus pipeline offloaded ops"},
           {"offload_chunk_num", kI, "0", "offload chunks"},
           {"offload_time", kF, "1.0", "offload time cost"},
           {"auto_offload_time", kB, "true", "measure the offload time"},
           {"offload_overlap_sr", kB, "true", "overlap offload save/resume"}});

  add_all(t, kWhyTorch,
          {{"init_model_with_meta_device", kB, "false", "build the model on the meta device"},
           {"empty_unused_memory_level", kI, "0", "torch.cuda.empty_cache() frequency"},
           {"train_sync_interval", kI, "null", "CPU-GPU synchronisation interval"},
           {"manual_gc", kB, "false", "Python garbage collection by hand"},
           {"manual_gc_interval", kI, "1", "manual GC interval"},
           {"manual_gc_eval", kB, "false", "manual GC around evaluation"}});

  add_all(t, kWhyResilience,
          {{"replication", kB, "false", "checkpoint replication across nodes"},
           {"replication_jump", kI, "null", "replication rank distance"},
           {"replication_factor", kI, "null", "replication copies"}});
}

}  // namespace primus::config::keys
