// Megatron-dialect keys: model architecture, position embeddings, tokenizer and initialisation
// (Primus models/megatron/language_model.yaml, primus_megatron_model.yaml and the model presets).
#include "config/key_builders.h"
#include "config/key_reasons.h"
#include "config/keys_megatron.h"

namespace primus::config::keys {

namespace {
constexpr const char* kWhyTikToken =
    "applies only to tokenizer_type TikTokenizer, which is not supported yet";
}  // namespace

// Defaults are Megatron-LM's argument defaults (what Megatron builds when no file sets a key), not Llama's: a
// preset that leaves out swiglu or add_bias_linear describes a GPT-2-style model, and is told so.
void add_megatron_model_keys(KeyTable& t) {
  t.group("model");
  t.add(impl("model", kS, "null", "model preset file name (set from the experiment's `model:`)"));
  t.add(impl("model_type", kS, "gpt", "Megatron model type")
            .supports(strings({"gpt"}), "only gpt (decoder-only) is implemented"));
  t.add(impl("num_layers", kI, "24", "transformer layers").non_null().check(positive()));
  t.add(impl("hidden_size", kI, "1024", "model width").non_null().check(positive()));
  t.add(impl("ffn_hidden_size", kI, "null",
             "MLP width (null: 4*hidden_size, or int(8*hidden_size/3 / 64)*64 with swiglu)")
            .check(positive()));
  t.add(impl("num_attention_heads", kI, "16", "query heads").non_null().check(positive()));
  t.add(impl("group_query_attention", kB, "false", "use num_query_groups key/value heads (GQA)"));
  t.add(impl("num_query_groups", kI, "null", "key/value heads with group_query_attention (null: = heads)")
            .check(positive()));
  t.add(impl("kv_channels", kI, "null", "head dimension (null: hidden_size / num_attention_heads)")
            .check(positive()));
  t.add(impl("max_position_embeddings", kI, "null", "longest position the model supports (null: seq_length)")
            .check(positive()));
  t.add(impl("untie_embeddings_and_output_weights", kB, "false",
             "separate output-layer weights (false: the lm-head reuses the input embedding)"));
  t.add(impl("add_qkv_bias", kB, "false", "bias on the query/key/value projections (Qwen 2)"));
  t.add(impl("add_bias_linear", kB, "true", "bias on every linear layer")
            .supports(is_bool(false), "only false (no linear biases) is implemented"));
  t.add(impl("qk_layernorm", kB, "false", "RMSNorm of q and k per head before RoPE (Qwen 3)"));
  t.add(unsup("qk_l2_norm", kB, "false", "L2 normalisation of q and k"));
  t.add(impl("swiglu", kB, "false", "SwiGLU MLP (gate, up, down)")
            .supports(is_bool(true), "only the SwiGLU MLP is implemented"));
  t.add(unsup("quick_geglu", kB, "false", "quick-GeGLU MLP activation"));
  t.add(unsup("openai_gelu", kB, "false", "OpenAI's tanh GeLU approximation"));
  t.add(unsup("squared_relu", kB, "false", "squared-ReLU MLP activation"));
  t.add(impl("normalization", kS, "LayerNorm", "normalisation layer: LayerNorm | RMSNorm")
            .check(one_of({"LayerNorm", "RMSNorm"}))
            .supports(strings({"RMSNorm"}), "only RMSNorm is implemented"));
  t.add(impl("norm_epsilon", kF, "1.0e-5", "epsilon of the norms").non_null().check(positive()));
  t.add(impl("layernorm_epsilon", kF, "null",
             "Megatron's own name of norm_epsilon (its TransformerConfig field); when set it wins")
            .check(positive()));
  t.add(unsup("apply_layernorm_1p", kB, "false", "norm weights stored as (gamma - 1)"));
  t.add(
      unsup("apply_residual_connection_post_layernorm", kB, "false", "residual taken after the norm (BERT)"));
  t.add(unsup("fp32_residual_connection", kB, "false", "keep the residual stream in fp32"));
  t.add(impl("hidden_dropout", kF, "0.1", "dropout after attention and MLP")
            .check(in_range(0, 1))
            .supports(null_or_number(0), "only 0 (no dropout) is implemented"));
  t.add(impl("attention_dropout", kF, "0.1", "dropout of the attention probabilities")
            .check(in_range(0, 1))
            .supports(null_or_number(0), "only 0 (no dropout) is implemented"));
  t.add(impl("final_logit_softcapping", kF, "null",
             "soft-cap the output logits to (-c, c): c tanh(logits / c) before the loss (Grok-2; null or 0: "
             "off)")
            .check(non_negative()));
  t.add(unsup("attn_logit_softcapping", kF, "null", "tanh soft-capping of the attention scores"));
  t.add(unsup("lfm_layer_types", kL, "null", "per-layer types of an LFM2 hybrid model"));
  t.add(noeff("conv_L_cache", kI, "3", kWhyOtherModel, "LFM2 convolution cache length"));
  t.add(noeff("conv_bias", kB, "false", kWhyOtherModel, "LFM2 convolution bias"));
  t.add(unsup("encoder_num_layers", kI, "null", "encoder layers (encoder-decoder models)"));
  t.add(unsup("decoder_num_layers", kI, "null", "decoder layers of an encoder-decoder model"));
  t.add(noeff("use_legacy_models", kB, "false", kWhyTE, "Megatron's legacy (non-mcore) model code"));
  t.add(noeff("deprecated_use_mcore_models", kB, "false", kWhyDeprecated, "old switch for mcore models"));
  t.add(noeff("transformer_impl", kS, "transformer_engine", kWhyTE,
              "layer implementation: transformer_engine | local"));
  t.add(noeff("attention_backend", kS, "auto", kWhyTE,
              "attention kernel: auto | flash | fused | unfused | local"));
  t.add(noeff("use_flash_attn", kB, "false", kWhyTE, "FlashAttention kernel (ours is always flash-style)"));
  t.add(noeff("use_te_activation_func", kB, "false", kWhyTE, "Transformer Engine activation kernel"));
  t.add(noeff("apply_query_key_layer_scaling", kB, "false", kWhyFp16, "scale Q.K^T by 1/layer for fp16"));
  t.add(noeff("attention_softmax_in_fp32", kB, "false", kWhySoftmaxFp32, "attention softmax in fp32"));
  t.add(noeff("perform_initialization", kB, "true",
              "weights are always initialised (a loaded checkpoint then replaces them)",
              "initialise weights"));
  t.add(noeff("use_cpu_initialization", kB, "null",
              "initialisation uses the counter-based RNG and is the same on every device",
              "init on the CPU"));

  t.group("position embedding");
  t.add(impl("position_embedding_type", kS, "learned_absolute",
             "positions: rope | learned_absolute | none | ...")
            .check(one_of({"learned_absolute", "rope", "mrope", "relative", "none", "yarn"}))
            .supports(strings({"rope"}), "only rope is implemented"));
  t.add(unsup("add_position_embedding", kB, "false", "add a learned absolute position embedding"));
  t.add(impl("rotary_base", kF, "10000", "RoPE theta").non_null().check(positive()));
  t.add(impl("rotary_percent", kF, "1.0", "fraction of the head dimension that RoPE rotates (partial rotary)")
            .check(in_range(0, 1)));
  t.add(impl("rotary_interleaved", kB, "false", "interleaved RoPE pairs (2i, 2i+1) instead of rotate-half")
            .supports(is_bool(false), "only rotate-half (false) is implemented"));
  t.add(unsup("rotary_seq_len_interpolation_factor", kF, "null", "linear RoPE position interpolation",
              null_or_number(1), "null or 1 (no interpolation)"));
  t.add(noeff("use_rotary_position_embeddings", kB, "null", kWhyDeprecated,
              "legacy alias of position_embedding_type: rope"));
  t.add(impl("use_rope_scaling", kB, "false",
             "Llama-3 RoPE frequency scaling (low 1, high 4, original context 8192)"));
  t.add(impl("rope_scaling_factor", kF, "8.0", "factor of the Llama-3 RoPE scaling").check(positive()));
  t.add(impl("rope_type", kS, "null",
             "RoPE of multi-latent attention's rotary slice: yarn (null with MLA) | rope; yarn needs MLA")
            .check(one_of({"rope", "yarn"})));
  t.add(impl("rotary_scaling_factor", kF, "1.0",
             "YaRN factor; with MLA also the softmax temperature m(factor, mscale_all_dim)^2 (docs/mla.md)")
            .check(positive()));
  t.add(impl("original_max_position_embeddings", kI, "null",
             "YaRN: context length before scaling (null: 4096, Megatron's MLA default)")
            .check(positive()));
  t.add(impl("mscale", kF, "1.0", "YaRN: cos/sin scale m(factor, mscale) / m(factor, mscale_all_dim)")
            .check(non_negative()));
  t.add(impl("mscale_all_dim", kF, "1.0", "YaRN: mscale_all_dim of the cos/sin and softmax scales")
            .check(non_negative()));
  t.add(
      impl("beta_fast", kF, "32", "YaRN: rotations above which a dim keeps its frequency").check(positive()));
  t.add(impl("beta_slow", kF, "1", "YaRN: rotations below which a dim is interpolated by the factor")
            .check(positive()));

  t.group("multi-latent attention");
  t.add(impl("multi_latent_attention", kB, "false",
             "multi-latent attention (DeepSeek-V2/V3 MLA; docs/mla.md); qk_layernorm then means the latent "
             "norms"));
  t.add(impl("q_lora_rank", kI, "null", "MLA query low-rank dimension (null: q = x Wq^T)").check(positive()));
  t.add(impl("kv_lora_rank", kI, "32", "MLA key/value latent dimension").check(positive()));
  t.add(impl("qk_head_dim", kI, "128", "MLA q/k head dimension without RoPE (nope)").check(positive()));
  t.add(impl("qk_pos_emb_head_dim", kI, "64", "MLA q/k RoPE head dimension (one k head shared by all heads)")
            .check(positive()));
  t.add(impl("v_head_dim", kI, "128", "MLA value head dimension").check(positive()));

  t.group("tokenizer");
  t.add(impl("tokenizer_type", kS, "null",
             "ByteTokenizer (Primus-C++), HuggingFaceTokenizer, Llama2/Llama3/Mixtral/DeepSeek*Tokenizer, "
             "GPT2BPETokenizer, NullTokenizer, ..."));
  t.add(impl("tokenizer_model", kS, "null",
             "tokenizer.json / tokenizer.model / a directory holding one, or a hub name found locally "
             "(PRIMUS_TOKENIZER_PATH, HF cache)"));
  t.add(impl("vocab_size", kI, "null", "vocabulary size (null: from the tokenizer)").check(positive()));
  t.add(impl("vocab_file", kS, "null", "GPT2BPETokenizer: GPT-2's vocab.json"));
  t.add(impl("merge_file", kS, "null", "GPT2BPETokenizer: GPT-2's merges.txt"));
  t.add(unsup("vocab_extra_ids", kI, "0", "extra sentinel tokens (T5)"));
  t.add(noeff("tiktoken_pattern", kS, "null", kWhyTikToken, "TikToken split pattern"));
  t.add(noeff("tiktoken_num_special_tokens", kI, "1000", kWhyTikToken, "TikToken special tokens"));
  t.add(noeff("tiktoken_special_tokens", kL, "null", kWhyTikToken, "TikToken special token names"));
  t.add(noeff("legacy_tokenizer", kB, "false", kWhyTE, "Megatron's legacy tokenizer classes"));
  t.add(noeff("trust_remote_code", kB, "false", "Primus-C++ never runs code downloaded with a tokenizer",
              "HuggingFace trust_remote_code"));

  t.group("initialisation");
  t.add(impl("init_method_std", kF, "0.02", "std of the normal weight initialisation")
            .non_null()
            .check(positive()));
  t.add(unsup("init_method_xavier_uniform", kB, "false", "Xavier-uniform initialisation"));

  t.group("fusion");
  t.add(noeff("bias_gelu_fusion", kB, "true", kWhyFusion, "fused bias + GeLU"));
  t.add(noeff("bias_swiglu_fusion", kB, "true", kWhyFusion, "fused bias + SwiGLU"));
  t.add(noeff("masked_softmax_fusion", kB, "true", kWhyFusion, "fused scale + mask + softmax"));
  t.add(noeff("bias_dropout_fusion", kB, "true", kWhyFusion, "fused bias + dropout + add"));
  t.add(noeff("apply_rope_fusion", kB, "true", kWhyFusion, "fused RoPE kernel"));
  t.add(noeff("cross_entropy_loss_fusion", kB, "false", kWhyFusion, "fused cross-entropy"));
  t.add(noeff("cross_entropy_fusion_impl", kS, "native", kWhyFusion, "cross-entropy kernel: native | te"));
  t.add(noeff("no_persist_layer_norm", kB, "false", kWhyFusion, "non-persistent LayerNorm kernel"));
  t.add(noeff("clone_scatter_output_in_embedding", kB, "true", kWhyTorch,
              "clone the embedding scatter output"));
  t.add(noeff("gradient_accumulation_fusion", kB, "true", kWhyFusion, "fused weight-gradient accumulation"));
  t.add(noeff("fused_single_qkv_rope", kB, "false", kWhyFusion,
              "RoPE on the packed QKV without splitting it (ours always reads q and k in place)"));
}

}  // namespace primus::config::keys
