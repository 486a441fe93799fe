#!/usr/bin/env bash
# The main job on its local default, no cluster needed: install the core CLI, validate
# an example experiment and render every object the operator would create for it.
#   hack/demo.sh [EXAMPLE.yaml]
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
"$ROOT/hack/setup.sh" --core
example="${1:-examples/qwen2.5-3b-gsm8k-agentcore.yaml}"
log "agentrl validate -f $example"
"$VENV/bin/agentrl" validate -f "$example"
log "agentrl render -f $example --show-command"
"$VENV/bin/agentrl" render -f "$example" --show-command
log "agentrl render -f $example"
"$VENV/bin/agentrl" render -f "$example"
