#!/usr/bin/env bash
# Every experiment of Primus's own repository, tried as a new user would: `primus train pretrain --config X
# --dry-run` (or `train posttrain` for the files that define a post_trainer module) with PRIMUS_CONFIG_PATH at
# the checkout's primus/configs. Each must either load (exit 0) or be refused with exit 2 and
# "not supported yet: <feature>"; anything else (an unknown key, a wrong type, an invalid value, an unknown
# framework or command, a crash) fails the test. An experiment whose parallel layout does not fit one rank is
# planned for the world it was written for (--nnodes N --nproc-per-node 8, the smallest N that fits). Prints the
# tally and every failure.
#
#   primus_examples_sweep.sh PRIMUS_BINARY
# The checkout: $PRIMUS_REPO_DIR (a Primus work tree), else the bare mirror $PRIMUS_REPO_MIRROR (default
# /work/.mirror/AMD-AGI+Primus/repo), whose examples/ and primus/configs/ are extracted to a temporary folder.
# Without either the test is skipped (exit 77, ctest SKIP_RETURN_CODE) with a message saying so.
#
# Counted: examples/{megatron,torchtitan,megatron_bridge}/configs/<GPU>/*.yaml (the experiments of the
# backends Primus-C++ speaks or is asked about: 351 at Primus fd1eeab), and every other backend's experiments
# (maxtext, maxdiffusion, diffusion, nemo_automodel, the megatron diffusion/ subfolders, ...), which must say
# "not supported yet".
set -uo pipefail
primus="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
jobs="${SWEEP_JOBS:-$(nproc)}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

repo="${PRIMUS_REPO_DIR:-}"
if [[ -z "$repo" ]]; then
  mirror="${PRIMUS_REPO_MIRROR:-/work/.mirror/AMD-AGI+Primus/repo}"
  if [[ -d "$mirror" ]] && git --git-dir="$mirror" rev-parse -q --verify HEAD >/dev/null 2>&1; then
    mkdir -p "$work/primus"
    # Only the folders the sweep reads (the mirror may lack large files elsewhere).
    # Each subtree archived by itself: an archive of HEAD with paths still visits the whole tree and stops
    # at the first large file the mirror left out.
    if ! { git --git-dir="$mirror" archive --prefix=examples/ HEAD:examples | tar -x -C "$work/primus" &&
      git --git-dir="$mirror" archive --prefix=primus/configs/ HEAD:primus/configs | tar -x -C "$work/primus"; }; then
      echo "primus_examples_sweep: could not extract examples/ and primus/configs/ from $mirror" >&2
      exit 1
    fi
    repo="$work/primus"
    echo "Primus checkout: $mirror at $(git --git-dir="$mirror" rev-parse --short HEAD)"
  fi
fi
if [[ -z "$repo" || ! -d "$repo/examples" || ! -d "$repo/primus/configs" ]]; then
  echo "SKIPPED: no Primus checkout (set PRIMUS_REPO_DIR to a work tree of github.com/AMD-AGI/Primus, or" \
    "PRIMUS_REPO_MIRROR to a bare clone)"
  exit 77
fi
[[ -n "${PRIMUS_REPO_DIR:-}" ]] && echo "Primus checkout: $repo"

# Errors Megatron raises for the same experiment (its own rules), which the sweep lists as invalid there too.
invalid_rules='rule: layers % pp == 0 without an explicit split\|rule: the layout.s m count == mtp_num_layers'
export invalid_rules

# One experiment: prints "<class>\t<file>\t<first error line>".
try_one() {
  local file="$1" primus="$2" roots="$3" out="$4"
  local command=pretrain
  grep -Eq '^[[:space:]]+post_trainer:' "$file" && command=posttrain
  local log="$out/$(echo "$file" | tr '/' '_').log"
  (cd "$out" && PRIMUS_CHECK_KEY_USE=1 PRIMUS_CONFIG_PATH="$roots" timeout 60 "$primus" train "$command" --config "$file" --dry-run \
    >/dev/null 2>"$log")
  local rc=$?
  # An experiment that gets its post_trainer module through `extends:` is an SFT run too.
  if [[ $rc -eq 2 && $command == pretrain ]] && grep -q 'runs with `primus train posttrain`' "$log"; then
    command=posttrain
    (cd "$out" && PRIMUS_CHECK_KEY_USE=1 PRIMUS_CONFIG_PATH="$roots" timeout 60 "$primus" train "$command" --config "$file" --dry-run \
      >/dev/null 2>"$log")
    rc=$?
  fi
  local first world=""
  # Primus's experiments are written for nodes of 8 GPUs: one whose parallel layout does not fit one rank
  # (expert_model_parallel_size 8, ...) is planned for the world it needs (--dry-run --nnodes N).
  if [[ $rc -eq 2 ]] && grep -q 'rule: ' "$log" && ! grep -q 'not supported yet: ' "$log"; then
    for nodes in 1 2 4 8 16 32; do
      (cd "$out" && PRIMUS_CHECK_KEY_USE=1 PRIMUS_CONFIG_PATH="$roots" timeout 60 "$primus" train "$command" \
        --config "$file" --dry-run --nnodes "$nodes" --nproc-per-node 8 >/dev/null 2>"$log.world")
      rc=$?
      if [[ $rc -eq 0 ]] || grep -q "$invalid_rules" "$log.world" || grep -q 'not supported yet: ' "$log.world"; then
        mv "$log.world" "$log"
        world=" (planned for ${nodes}x8 ranks)"
        break
      fi
    done
  fi
  first="$(grep -m1 'error:' "$log" | cut -c1-300)"
  if [[ $rc -eq 0 ]]; then
    printf 'load\t%s\t%s\n' "$file" "$world"
  elif [[ "$file" == *.template.yaml ]] && [[ $rc -eq 2 ]] && grep -q 'is a template placeholder' "$log"; then
    # Primus's templates hold <PLACEHOLDERS> to fill in; Primus cannot run them either. The error names it.
    printf 'template\t%s\t%s\n' "$file" "$(grep -m1 -o "name '<[^>]*>'" "$log")"
  elif [[ $rc -eq 2 ]] && grep -q "is a module key at the experiment's top level" "$log"; then
    # Module keys written beside `extends:` at the experiment's top level: Primus ignores them silently (the
    # LoRA settings of llama3_8B-BF16-lora-sft.yaml never reach its trainer); we name the key.
    printf 'misplaced\t%s\t%s\n' "$file" "$(grep -m1 -o "'[^']*' is a module key" "$log")"
  elif [[ $rc -eq 2 ]] && grep -q "$invalid_rules" "$log"; then
    # A layer count the pipeline size does not divide, without an uneven split: Megatron's own
    # get_num_layers_to_build refuses it too (Primus registers allow_padding_num_layers but nothing reads it).
    # A pipeline layout without the MTP depths the model has: Megatron's validate_layer_layout asserts.
    printf 'invalid\t%s\t%s\n' "$file" "$(grep -m1 -o 'num_layers=[0-9]*[^)]*) is not divisible by pipeline_model_parallel_size=[0-9]*\|places [0-9]* MTP layers (m) but mtp_num_layers=[0-9]*' "$log")"
  elif [[ $rc -eq 2 ]] && grep -q 'not supported yet: ' "$log" &&
    ! grep 'error:' "$log" | grep -Eq "unknown key|wrong type|invalid value|unknown framework|unknown command|missing required"; then
    printf 'refused\t%s\t%s\n' "$file" "$(grep -m1 -o 'not supported yet: .*' "$log" | cut -c1-160)"
  else
    printf 'wrong\t%s\texit %s: %s\n' "$file" "$rc" "${first:-$(tail -n1 "$log" | cut -c1-300)}"
  fi
}
export -f try_one

mkdir -p "$work/logs"
(cd "$repo" && find examples -name '*.yaml' -path '*/configs/*' | sort) >"$work/all.txt"
(cd "$repo" && printf '%s\0' $(cat "$work/all.txt")) |
  xargs -0 -P "$jobs" -I{} bash -c 'try_one "$@"' _ "$repo/{}" "$primus" "$repo/primus/configs" "$work/logs" \
    >"$work/results.tsv"

sed -i "s|$repo/||" "$work/results.tsv"
[[ -n "${SWEEP_RESULTS:-}" ]] && cp "$work/results.tsv" "$SWEEP_RESULTS"  # every file's class and first error
counted='^[a-z]+\texamples/(megatron|torchtitan|megatron_bridge)/configs/MI[0-9]+X/[^/]+\.yaml\t'
tally() {
  local label="$1" pattern="$2" invert="$3"
  local rows
  if [[ "$invert" == 1 ]]; then rows="$(grep -Pv "$pattern" "$work/results.tsv")"; else
    rows="$(grep -P "$pattern" "$work/results.tsv")"; fi
  printf '%-52s total %3d: load %3d, refused cleanly %3d, wrong error %3d\n' "$label" \
    "$(grep -c . <<<"$rows")" "$(grep -c '^load' <<<"$rows")" "$(grep -c '^refused' <<<"$rows")" \
    "$(grep -c '^wrong' <<<"$rows")"
  local templates
  templates="$(grep -c '^template' <<<"$rows")"
  [[ "$templates" -gt 0 ]] && printf '%-52s   templates with placeholders, refused naming them: %d\n' "" "$templates"
  local misplaced
  misplaced="$(grep -c '^misplaced' <<<"$rows")"
  [[ "$misplaced" -gt 0 ]] &&
    printf '%-52s   module keys at the experiment level (Primus ignores them), refused naming them: %d\n' "" \
      "$misplaced"
  local invalid
  invalid="$(grep -c '^invalid' <<<"$rows")"
  [[ "$invalid" -gt 0 ]] &&
    printf '%-52s   pipeline splits / layouts Megatron refuses as well, refused naming the rule: %d\n' "" "$invalid"
  return 0
}
tally "megatron, torchtitan, megatron_bridge (MI300X/325X/355X)" "$counted" 0
tally "other backends and subfolders" "$counted" 1
echo "refusals by feature (first 'not supported yet' of each file):"
grep '^refused' "$work/results.tsv" | cut -f3 | sed -E 's/^not supported yet: ([^=(]*).*/  \1/' | sort | uniq -c |
  sort -rn | head -40
if grep -q '^invalid' "$work/results.tsv"; then
  echo "invalid for Megatron as well (layers % pp, MTP depths missing from the pipeline layout):"
  grep '^invalid' "$work/results.tsv" | cut -f2,3 | sed 's/^/  /'
fi
if grep -q '^wrong' "$work/results.tsv"; then
  echo "WRONG KIND OF ERROR:"
  grep '^wrong' "$work/results.tsv" | cut -f2,3 | sed 's/^/  /'
  exit 1
fi
echo "every experiment loads, is refused with \"not supported yet\", or breaks a pipeline rule Megatron enforces too (listed)"
