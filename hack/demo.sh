#!/usr/bin/env bash
# The first command, no cluster needed: install the core CLI, validate an example experiment,
# write every object the operator would create to a file, and print a one-screen summary
# (objects, GPU layout, slime's command) instead of the 450 KiB of YAML.
#   hack/demo.sh [EXAMPLE.yaml]        # AGENTRL_DEMO_OUT: where the YAML goes (default _out/)
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
out_dir="${AGENTRL_DEMO_OUT:-_out}"
full="$out_dir/$(basename "${example%.*}").yaml"
mkdir -p "$out_dir"
log "agentrl validate -f $example --image $image ${policy[*]}"
"$VENV/bin/agentrl" validate -f "$example" --image "$image" "${policy[@]}"
log "agentrl render -f $example --image $image ${policy[*]} > $full"
"$VENV/bin/agentrl" render -f "$example" --image "$image" "${policy[@]}" > "$full"
log "agentrl render -f $example --image $image ${policy[*]} --summary"
"$VENV/bin/agentrl" render -f "$example" --image "$image" "${policy[@]}" --summary
log "every object in full: $full ($(wc -c < "$full") bytes; the RayJob is the last document)"
read -r name ns < <("$VENV/bin/python" -c \
  'import sys, yaml; m = yaml.safe_load(open(sys.argv[1]))["metadata"]; print(m["name"], m.get("namespace", "default"))' \
  "$example")
cat <<NEXT
Next, with KubeRay and the agentrl chart installed (README.md):
  kubectl apply -f $example
  kubectl get rlx $name -n $ns -w      # phase, rollout, reward
  agentrl logs $name -n $ns -f         # the driver's output (docs/operator.md, "Logs")
NEXT
