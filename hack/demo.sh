#!/usr/bin/env bash
# The main job on its local default, no cluster needed: install the core CLI, validate
# an example experiment and render every object the operator would create for it.
#   hack/demo.sh [EXAMPLE.yaml]
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
"$ROOT/hack/setup.sh" --core
example="${1:-examples/qwen2.5-3b-gsm8k-agentcore.yaml}"
# agentrl publishes no Ray pod image yet: render needs one, so the demo names the image a local
# build of images/slime/Dockerfile would be (images/README.md); validate warns that it is not
# pinned by digest, as it would for yours until you push it and pin it. The examples run as an
# IRSA ServiceAccount, which the default policy does not allow: the example policy allows it.
image="${AGENTRL_IMAGE:-agentrl-runtime:dev}"
policy=(--policy examples/platform/policy.yaml)
log "agentrl validate -f $example --image $image ${policy[*]}"
"$VENV/bin/agentrl" validate -f "$example" --image "$image" "${policy[@]}"
log "agentrl render -f $example ${policy[*]} --show-command"
"$VENV/bin/agentrl" render -f "$example" "${policy[@]}" --show-command
log "agentrl render -f $example --image $image ${policy[*]}"
"$VENV/bin/agentrl" render -f "$example" --image "$image" "${policy[@]}"
