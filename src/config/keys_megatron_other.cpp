// Megatron-dialect keys of other model types, inference and RL (Primus trainer_base.yaml carries all of
// Megatron's arguments). Switches that would turn such a mode on are "not supported yet"; their settings have
// no effect for decoder-only pretraining.
#include "config/key_builders.h"
#include "config/key_reasons.h"
#include "config/keys_megatron.h"

namespace primus::config::keys {

void add_megatron_other_model_keys(KeyTable& t) {
  t.group("other model types");
  t.add(unsup("yaml_cfg", kS, "null", "Megatron's own YAML-config mode"));
  t.add(unsup("spec", kA, "null", "custom layer spec (module path)"));
  t.add(unsup("heterogeneous_layers_config_path", kS, "null", "per-layer heterogeneous configuration file"));
  t.add(
      unsup("heterogeneous_layers_config_encoded_json", kS, "null", "per-layer heterogeneous configuration"));
  t.add(unsup("vision_pretraining", kB, "false", "vision-model pretraining"));
  t.add(unsup("retro_add_retriever", kB, "false", "Retro retrieval-augmented model"));
  t.add(unsup("perform_rl_step", kB, "false", "RL (GRPO) training step"));
  add_all(t, kWhyOtherModel,
          {{"bert_binary_head", kB, "true", "BERT next-sentence head"},
           {"vision_pretraining_type", kS, "classify", "vision task"},
           {"vision_backbone_type", kS, "vit", "vision backbone"},
           {"swin_backbone_type", kS, "tiny", "Swin size"},
           {"num_classes", kI, "1000", "image classes"},
           {"img_h", kI, "224", "image height"},
           {"img_w", kI, "224", "image width"},
           {"num_channels", kI, "3", "image channels"},
           {"patch_dim", kI, "16", "ViT patch size"},
           {"classes_fraction", kF, "1.0", "fraction of classes"},
           {"data_per_class_fraction", kF, "1.0", "fraction of data per class"},
           {"retro_project_dir", kS, "null", "Retro project"},
           {"retro_cyclic_train_iters", kI, "null", "Retro cyclic iterations"},
           {"retro_encoder_layers", kI, "2", "Retro encoder layers"},
           {"retro_encoder_hidden_dropout", kF, "0.1", "Retro encoder dropout"},
           {"retro_encoder_attention_dropout", kF, "0.1", "Retro encoder attention dropout"},
           {"retro_num_neighbors", kI, "2", "Retro neighbours"},
           {"retro_num_retrieved_chunks", kI, "2", "Retro chunks"},
           {"retro_attention_gate", kF, "1", "Retro attention gate"},
           {"retro_verify_neighbor_count", kB, "true", "Retro neighbour check"},
           {"dino_local_img_size", kI, "96", "DINO local crop size"},
           {"dino_local_crops_number", kI, "10", "DINO local crops"},
           {"dino_head_hidden_size", kI, "2048", "DINO head width"},
           {"dino_bottleneck_size", kI, "256", "DINO bottleneck"},
           {"dino_freeze_last_layer", kF, "1", "DINO frozen last layer epochs"},
           {"dino_norm_last_layer", kB, "false", "DINO normalised last layer"},
           {"dino_warmup_teacher_temp", kF, "0.04", "DINO teacher warm-up temperature"},
           {"dino_teacher_temp", kF, "0.07", "DINO teacher temperature"},
           {"dino_warmup_teacher_temp_epochs", kI, "30", "DINO teacher warm-up epochs"},
           {"mask_type", kS, "random", "masked-image type"},
           {"mask_factor", kF, "1.0", "masked-image factor"},
           {"iter_per_epoch", kI, "1250", "vision iterations per epoch"},
           {"ict_head_size", kI, "null", "ICT head size"},
           {"biencoder_projection_dim", kI, "0", "bi-encoder projection"},
           {"biencoder_shared_query_context_model", kB, "false", "shared bi-encoder"},
           {"ict_load", kS, "null", "ICT checkpoint"},
           {"bert_load", kS, "null", "BERT checkpoint"},
           {"titles_data_path", kS, "null", "ICT titles"},
           {"query_in_block_prob", kF, "0.1", "ICT query-in-block probability"},
           {"use_one_sent_docs", kB, "false", "ICT one-sentence documents"},
           {"evidence_data_path", kS, "null", "retriever evidence"},
           {"retriever_report_topk_accuracies", kL, "[]", "retriever top-k report"},
           {"retriever_score_scaling", kB, "false", "retriever score scaling"},
           {"retriever_seq_length", kI, "256", "retriever sequence length"},
           {"block_data_path", kS, "null", "retriever blocks"},
           {"embedding_path", kS, "null", "retriever embeddings"},
           {"indexer_batch_size", kI, "128", "retriever indexer batch"},
           {"indexer_log_interval", kI, "1000", "retriever indexer log interval"},
           {"output_bert_embeddings", kB, "false", "write BERT embeddings"},
           {"bert_embedder_type", kS, "megatron", "BERT embedder: megatron | huggingface"}});

  t.group("inference");
  add_all(t, kWhyInference,
          {{"inference_batch_times_seqlen_threshold", kI, "-1", "pipelined inference threshold"},
           {"inference_dynamic_batching", kB, "false", "dynamic batching"},
           {"inference_dynamic_batching_buffer_size_gb", kF, "40.0", "dynamic batching buffer"},
           {"inference_dynamic_batching_buffer_guaranteed_fraction", kF, "0.2", "guaranteed buffer fraction"},
           {"inference_dynamic_batching_buffer_overflow_factor", kF, "null", "buffer overflow factor"},
           {"inference_dynamic_batching_max_requests_override", kI, "null", "request limit"},
           {"inference_dynamic_batching_max_tokens_override", kI, "null", "token limit"},
           {"inference_max_requests", kI, "8", "concurrent requests"},
           {"inference_max_seq_length", kI, "2560", "prefill + decode length"},
           {"max_tokens_to_oom", kI, "12000", "token limit before OOM"},
           {"flash_decode", kB, "false", "flash decoding"},
           {"cuda_graph_warmup_steps", kI, "3", "CUDA-graph warm-up steps"},
           {"cuda_graph_scope", kS, "full", "CUDA-graph scope: full | attn"}});
  t.add(noeff("enable_cuda_graph", kB, "false", kWhyTE, "capture the step in CUDA graphs"));
  t.add(noeff("external_cuda_graph", kB, "false", kWhyTE, "CUDA graphs captured outside Megatron"));

  t.group("reinforcement learning");
  add_all(t, kWhyRL,
          {{"rl_prompts_per_eval", kI, "32", "RL prompts per evaluation"},
           {"grpo_prompts_per_step", kI, "32", "GRPO prompts per step"},
           {"grpo_group_size", kI, "2", "GRPO group size"},
           {"grpo_iterations", kI, "2", "GRPO iterations"},
           {"grpo_clamp_eps_lower", kF, "0.01", "GRPO lower clamp"},
           {"grpo_clamp_eps_upper", kF, "0.01", "GRPO upper clamp"},
           {"grpo_kl_beta", kF, "0.001", "GRPO KL weight"},
           {"grpo_entropy_term_weight", kF, "0.0", "GRPO entropy weight"},
           {"grpo_filter_groups_with_same_reward", kB, "false", "GRPO group filter"},
           {"grpo_default_temperature", kF, "1.0", "GRPO sampling temperature"},
           {"grpo_default_top_p", kF, "0", "GRPO top-p"},
           {"langrl_inference_server_type", kS, "inplace_megatron", "RL inference server"},
           {"langrl_inference_server_conversation_template", kS, "null", "RL conversation template"},
           {"langrl_env_config", kS, "null", "RL environment configuration"},
           {"rl_offload_optimizer_during_inference", kB, "false", "offload the optimizer during rollouts"},
           {"rl_offload_kv_cache_during_training", kB, "false", "offload the KV cache while training"},
           {"rl_remove_kv_cache_during_training", kB, "false", "drop the KV cache while training"},
           {"rl_reset_cuda_graphs", kB, "false", "reset CUDA graphs"},
           {"rl_partial_rollouts", kB, "false", "partial rollouts"},
           {"rl_inference_logprobs_is_correction", kB, "false", "log-prob correction"},
           {"rl_importance_sampling_truncation_coef", kF, "null", "importance-sampling truncation"},
           {"rl_calculate_intra_group_similarity", kB, "false", "intra-group similarity"}});
}

}  // namespace primus::config::keys
