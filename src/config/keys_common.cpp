// Keys every module has in both dialects (Primus modules/module_base.yaml, the keys Primus sets itself) and
// the Primus-C++ extension keys.
#include "config/key_builders.h"
#include "config/key_reasons.h"
#include "config/keys_megatron.h"

namespace primus::config::keys {

namespace {
constexpr const char* kWhySink = "Primus log-sink level; Primus-C++ logs at info (`primus --debug`: debug)";
}  // namespace

void add_common_keys(KeyTable& t) {
  t.group("run");
  t.add(impl("framework", kS, "megatron", "key dialect: megatron (flat keys) | torchtitan (sections)")
            .check(one_of({"megatron", "torchtitan"})));
  t.add(noeff("name", kS, "null", kWhyInfo, "module name (Primus sets it: pre_trainer)"));
  t.add(
      noeff("trainable", kB, "false", "Primus module flag; `train pretrain` always trains", "module trains"));
  t.add(noeff("sink_level", kS, "null", kWhySink, "level of all log sinks"));
  t.add(noeff("file_sink_level", kS, "DEBUG", kWhySink, "log-file level"));
  t.add(noeff("stderr_sink_level", kS, "INFO", kWhySink, "stderr log level"));

  t.group("Primus-C++ extensions");
  t.add(impl("device", kS, "auto", "where to train: auto (a GPU when present, else the CPU) | cpu | cuda")
            .non_null()
            .check(one_of({"auto", "cpu", "cuda"}))
            .ext());
  t.add(impl("text_data_path", kS, "null",
             "training text: a file, or a directory of fortune-style files (documents separated by lines "
             "holding only '%'), read as byte tokens")
            .ext());
  t.add(impl("gemm_tuning_file", kS, "null", "GEMM tuning cache (cuBLASLt algorithm choices)").ext());
  t.add(impl("nan_policy", kS, "halt",
             "non-finite loss or gradient: halt (exit code 4, names the tensor) | skip (the update is not "
             "applied)")
            .non_null()
            .check(one_of({"halt", "skip"}))
            .ext());
  t.add(impl("spiky_loss_policy", kS, "warn",
             "loss spike (check_for_spiky_loss): warn | skip (the update is not applied)")
            .non_null()
            .check(one_of({"warn", "skip"}))
            .ext());
  t.add(impl("spiky_loss_factor", kF, "10.0", "a loss >= this x the max of the last 100 losses is a spike")
            .non_null()
            .check(positive())
            .ext());
  t.add(impl("hang_timeout_s", kF, "0",
             "hang watchdog: seconds without step progress before the run is declared hung (exit code 5, "
             "stuck ranks named); 0 = max(3 x p99 step time, 60 s); < 0 = off")
            .non_null()
            .ext());
  t.add(impl("straggler_factor", kF, "1.2",
             "a rank whose recent step time is >= this x the median over ranks is flagged as a straggler")
            .non_null()
            .check(positive())
            .ext());
}

}  // namespace primus::config::keys
