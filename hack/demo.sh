#!/usr/bin/env bash
# The main job on its local default, no cluster needed: install the core CLI, validate
# an example experiment and render every object the operator would create for it.
#   hack/demo.sh [EXAMPLE.yaml]
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
"$ROOT/hack/setup.sh" --core
example="${1:-examples/qwen2.5-3b-gsm8k-agentcore.yaml}"
# The examples run as an IRSA ServiceAccount, which the default policy does not allow.
policy=(--policy examples/platform/policy.yaml)
log "agentrl validate -f $example ${policy[*]}"
"$VENV/bin/agentrl" validate -f "$example" "${policy[@]}"
log "agentrl render -f $example ${policy[*]} --show-command"
"$VENV/bin/agentrl" render -f "$example" "${policy[@]}" --show-command
log "agentrl render -f $example ${policy[*]}"
"$VENV/bin/agentrl" render -f "$example" "${policy[@]}"
