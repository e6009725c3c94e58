#pragma once
// Why a key has no effect here; shared by the key tables and shown by --dry-run (keys are grouped by reason).
namespace primus::config::keys {

inline constexpr const char* kWhyRocm = "ROCm/AMD-specific (hipBLASLt, rocSHMEM, rocm-smi, MI300X tuning)";
inline constexpr const char* kWhyTurbo =
    "Primus-Turbo (AMD kernel library) switch; our CUDA kernels are fixed";
inline constexpr const char* kWhyTorch =
    "PyTorch-specific (torch.compile, autograd/profiler/allocator/dataloader/GC internals)";
inline constexpr const char* kWhyTE =
    "Transformer Engine / kernel-implementation choice; it does not change the math, and our kernels are "
    "fixed";
inline constexpr const char* kWhyFusion = "kernel-fusion switch: same math, and our fusions are fixed";
inline constexpr const char* kWhyTracking =
    "experiment-tracking integration (W&B, MLflow, one-logger, TraceLens, app tags) not in Primus-C++";
inline constexpr const char* kWhyLogExtra =
    "extra Megatron logging/timing output; our log line and JSONL metrics are fixed (docs/configuration.md)";
inline constexpr const char* kWhyProfile =
    "PyTorch profiler switch; Primus-C++ traces come from `primus report`";
inline constexpr const char* kWhyWorld1 =
    "a setting of Megatron's / PyTorch's distributed machinery (timeouts, NCCL buffer registration, FSDP "
    "resharding and buffering, reduction dtypes of other implementations) that does not change results; the "
    "data-parallel layouts here have their own (docs/distributed.md)";
inline constexpr const char* kWhyDpKnob =
    "a tuning knob of Megatron's / PyTorch's data-parallel machinery; here the parameter regions (one per "
    "layer) are the buckets, shards and gather units, and use_distributed_optimizer / use_torch_fsdp2 / "
    "data_parallel_sharding_strategy pick the layout (docs/distributed.md)";
inline constexpr const char* kWhyMoE =
    "a knob of an MoE feature that is not supported yet (expert tensor parallelism, DeepEP, upcycling, ...)";
inline constexpr const char* kWhyMoeAlways =
    "the MoE layer always works this way here: experts run as grouped GEMMs over tokens permuted by fused "
    "kernels, with the router in fp32 (docs/moe.md)";
inline constexpr const char* kWhyMoeEp1 =
    "how tokens reach experts on other ranks: Primus-C++ always dispatches by all-to-all-v on the compute "
    "stream (the results of every dispatcher type; overlapping it is not done yet)";
// Knobs of Megatron's own parallel implementations: the layouts themselves are implemented here, by other
// code.
inline constexpr const char* kWhyPP =
    "a knob of Megatron's pipeline implementation (p2p backend and overlap, encoder split, deferred "
    "embedding "
    "wgrad, warm-up, dumps); the pipeline here runs its generated schedules (docs/pipeline.md)";
inline constexpr const char* kWhyTP =
    "a knob of Megatron's / Transformer Engine's tensor-parallel implementation (userbuffers overlap, async "
    "all-reduce, TorchTitan's loss parallelism switch); tensor parallelism here has its own collectives, "
    "overlapped by tp_comm_overlap (docs/parallelism.md)";
inline constexpr const char* kWhyCP =
    "a knob of Megatron's context-parallel variants (hierarchical and hybrid CP groups, per-rank sequence "
    "caps); context parallelism here splits each sequence in 2·CP chunks over one group "
    "(docs/parallelism.md)";
// TorchTitan's pipeline settings: its dialect takes pipeline_parallel_degree 1 only.
inline constexpr const char* kWhyTitanPP =
    "applies only to pipeline parallelism, which the TorchTitan dialect does not take yet (degree 1; the "
    "Megatron dialect's pipeline keys run it)";
inline constexpr const char* kWhyFp8 =
    "a Transformer Engine / kitchen FP8 hook with no counterpart here (FP8 is model/fp8_linear.h)";
inline constexpr const char* kWhyFp4 = "applies only when fp4 is set, which is not supported yet";
inline constexpr const char* kWhyFp16 =
    "applies only to fp16 training with loss scaling, which is not supported";
inline constexpr const char* kWhyOtherModel =
    "applies to other Megatron model types (BERT, T5, ViT, DINO, Retro, ICT, hybrid/Mamba, LFM), not to "
    "decoder-only GPT pretraining";
inline constexpr const char* kWhyInference = "applies to Megatron inference/serving, not to training";
inline constexpr const char* kWhyRL = "applies to RL post-training (GRPO), not to pretraining";
inline constexpr const char* kWhySft =
    "a Primus SFT variant switch (ODC sequence-length balancing, Megatron-Bridge packing parity, "
    "NaN-gradient "
    "zeroing) that `train posttrain` does not implement";
inline constexpr const char* kWhyCkptImpl =
    "checkpoint storage/layout detail; Primus-C++ has one checkpoint format (the checkpoint issue)";
inline constexpr const char* kWhyDeprecated = "deprecated in Megatron-LM and ignored there too";
inline constexpr const char* kWhyLauncher =
    "launcher/rendezvous setting; rank and world come from the environment (torchrun, Slurm, OpenMPI)";
inline constexpr const char* kWhyResilience =
    "fault-tolerance / straggler / rerun-state-machine integration of NVIDIA's stack; Primus-C++ has its own "
    "monitors (the reliability issue)";
inline constexpr const char* kWhyOptOther =
    "applies only to another optimizer (sgd, muon), not supported yet";
inline constexpr const char* kWhyZeroBubble =
    "a knob of Primus's zero-bubble runtime (schedule tables, timers, optimizer post-validation); the "
    "zero-bubble schedules here are generated and checked before they run (docs/pipeline.md)";
inline constexpr const char* kWhyOffload = "CPU offload setting; applies only when offload is enabled";
inline constexpr const char* kWhyInfo = "descriptive value; recorded in the run directory";
inline constexpr const char* kWhyData =
    "data-loader implementation detail of Megatron/PyTorch; our loader reads the same samples";
inline constexpr const char* kWhyQuantConverter =
    "used only by the float8/mx model converters (model.converters), which are not supported yet";
inline constexpr const char* kWhyHybrid =
    "applies only to hybrid / Mamba / linear-attention layers (is_hybrid_model, "
    "experimental_attention_variant), "
    "not supported yet";
inline constexpr const char* kWhyAttnVariant =
    "applies only to sparse / compressed attention and hyper-connections (experimental_attention_variant, "
    "hc_mult > 1: DeepSeek-V4, Kimi-K3), not supported yet";
inline constexpr const char* kWhyTokenizerOther =
    "tokenizer-library option; the trainer reads pre-tokenized data and takes only the vocabulary size from "
    "the "
    "tokenizer";
inline constexpr const char* kWhyEnvAsKey =
    "an environment-variable name written as a module key; Primus passes it to the backend's argument "
    "namespace, where nothing reads it";
inline constexpr const char* kWhyDuplicateNan =
    "rerun-state-machine spelling; Primus-C++ checks loss and gradients as check_for_nan_in_loss_and_grad "
    "says";
inline constexpr const char* kWhyRecomputeModules =
    "which modules selective recomputation covers; ours recomputes a fixed set (docs/configuration.md)";
inline constexpr const char* kWhyLogAverages =
    "the log line reports each interval's own step time and the run's summary the median step, so there is "
    "no running average to skip into or reset";
inline constexpr const char* kWhySoftmaxFp32 = "softmax and reductions always run in fp32 here";

}  // namespace primus::config::keys
