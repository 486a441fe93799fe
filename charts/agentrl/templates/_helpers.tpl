{{/* Chart name, truncated to the 63 characters of a label value. */}}
{{- define "agentrl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: object name prefix. Truncated at 63 characters because some Kubernetes name
fields are limited to that (DNS-1123 labels).
*/}}
{{- define "agentrl.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Chart name and version, for the helm.sh/chart label. */}}
{{- define "agentrl.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the operator pod; never change them on upgrade (selectors are immutable). */}}
{{- define "agentrl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agentrl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
Labels of an object: the chart's standard labels, then commonLabels, then each map in `extra`
(later maps win), then the selector labels. Merged as maps, so a key set twice appears once
with the user's value, except the selector labels: Services, the Deployment and the
ServiceMonitor select by them, so the chart's values always win there.
Call with (dict "root" $ "extra" (list map1 map2 ...)).
*/}}
{{- define "agentrl.labelsWith" -}}
{{- $root := .root }}
{{- $labels := dict
  "helm.sh/chart" (include "agentrl.chart" $root)
  "app.kubernetes.io/version" ($root.Values.image.tag | default $root.Chart.AppVersion | toString)
  "app.kubernetes.io/managed-by" $root.Release.Service
  "app.kubernetes.io/part-of" "agentrl" }}
{{- range prepend (.extra | default list) $root.Values.commonLabels }}
{{- $labels = mergeOverwrite $labels (. | default dict) }}
{{- end }}
{{- $labels = mergeOverwrite $labels (include "agentrl.selectorLabels" $root | fromYaml) }}
{{- toYaml $labels }}
{{- end }}

{{/* Labels on every object of the chart. */}}
{{- define "agentrl.labels" -}}
{{ include "agentrl.labelsWith" (dict "root" .) }}
{{- end }}

{{/* Labels of a monitoring object: chart labels + monitoring.additionalLabels + its own. */}}
{{- define "agentrl.monitoringLabels" -}}
{{ include "agentrl.labelsWith" (dict "root" .root "extra" (list .root.Values.monitoring.additionalLabels .extra)) }}
{{- end }}

{{/* The operator's ServiceAccount name. */}}
{{- define "agentrl.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "agentrl.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The operator image: repository@digest when a digest is set, else repository:tag. No
repository stops the install with the fix: agentrl has published no operator image yet, and a
Deployment that can never pull would only sit in ImagePullBackOff.
*/}}
{{- define "agentrl.image" -}}
{{- $repository := required "image.repository is not set: agentrl has published no operator image yet. Build the repository's top-level Dockerfile, push it, and set image.repository=<registry>/agentrl-operator and image.digest=sha256:<digest> (images/README.md)." .Values.image.repository }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
Prometheus Operator objects render only where their API is served, so a plain cluster still
installs, or always with monitoring.assumeApiAvailable (`helm template | kubectl apply`, or
installing before the Prometheus Operator's CRDs exist).
*/}}
{{- define "agentrl.hasMonitoringAPI" -}}
{{- if or .Values.monitoring.assumeApiAvailable (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") }}true{{- end }}
{{- end }}

{{/*
A Prometheus duration (the schema's pattern: 90s, 1h30m, 500ms) plus min(itself, 5m), as a
duration. AgentRLExperimentFailed's settling time: see prometheusrule.yaml.
*/}}
{{- define "agentrl.settledAfter" -}}
{{- $ms := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 "w" 604800000 "y" 31536000000 }}
{{- $total := 0 }}
{{- range regexFindAll "[0-9]+(ms|s|m|h|d|w|y)" . -1 }}
{{- $total = add $total (mul (regexFind "^[0-9]+" . | atoi) (get $ms (regexFind "[a-z]+$" .))) }}
{{- end }}
{{- $total = add $total (min $total 300000) }}
{{- $out := printf "%dms" $total }}
{{- range list (list 3600000 "h") (list 60000 "m") (list 1000 "s") }}
{{- if and (eq $out (printf "%dms" $total)) (eq (mod $total (index . 0)) 0) }}
{{- $out = printf "%d%s" (div $total (index . 0)) (index . 1) }}
{{- end }}
{{- end }}
{{- $out }}
{{- end }}

{{/*
The operator's namespaced permissions (charts/agentrl/README.md, "RBAC"), shared by the ClusterRole and
the per-namespace Roles. Exactly the calls the controller makes (operator/agentrl/controller:
kopf's list/watch, then get/create/patch in kube.py); nothing on secrets, no wildcards, no
update or delete anywhere: children are removed by the garbage collector through their
owner references, and users delete RLExperiments.
*/}}
{{- define "agentrl.namespacedRules" -}}
# The custom resource: kopf lists and watches it; the operator GETs one only when its RayJob
# disappears, to tell a RayJob deleted by hand (the run failed) from one the garbage collector
# removes with its experiment (the two watches are separate streams, in no set order). It
# writes only the status, with PATCH.
- apiGroups: ["agentrl.io"]
  resources: ["rlexperiments"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["agentrl.io"]
  resources: ["rlexperiments/status"]
  verbs: ["patch"]
# Owner references with blockOwnerDeletion need update on the owner's finalizers
# (OwnerReferencesPermissionEnforcement admission).
- apiGroups: ["agentrl.io"]
  resources: ["rlexperiments/finalizers"]
  verbs: ["update"]
# The RayJob: created, read back on a name clash, patched when lifecycle fields change,
# watched for KubeRay's status.
- apiGroups: ["ray.io"]
  resources: ["rayjobs"]
  verbs: ["get", "list", "watch", "create", "patch"]
# Runtime-config and bundle-code ConfigMaps and the gateway/metrics Service: created, read
# back on a name clash, and patched only when one of ours was rendered from an earlier
# generation while its RayJob does not exist yet (refused, or the operator stopped between).
- apiGroups: [""]
  resources: ["configmaps", "services"]
  verbs: ["get", "create", "patch"]
# Ray pods (labelled agentrl.io/experiment), watched to explain stuck ones (ImagePullBackOff,
# Unschedulable), and one experiment's listed once after a start to forget a stuck pod that
# went while no operator ran; never read one by one, never exec, never write.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
# Events on RLExperiments: one new core/v1 Event per transition (never updated). Listed only
# for a pod held in ContainerCreating past operator.stuckCreatingSeconds, to read whether a
# volume or its sandbox holds it (FailedMount and kin), and for KubeRay's submitter Job when
# no submitter pod exists that long (FailedCreate); never watched. `create` also carries the
# dry run that asks whether a namespace is being deleted (nothing is stored).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "list"]
{{- end }}

{{/*
Cluster-scoped reads wherever the operator runs: kopf watches CRDs to find its resources, and
the operator reads KubeRay's RayJob CRD (that one object) to refuse experiments whose RayJob
the installed KubeRay would silently prune. With watchNamespaces, also list/watch namespaces:
kopf serving named namespaces (not cluster-wide) lists and then watches them before it serves
any (kopf/_core/reactor/observation.py, namespace_observer); refused, it retries the 403
through its error backoffs (54 s, logged at ERROR) before it falls back, on every start and
failover. Cluster-wide, kopf never reads namespaces, so nothing is granted.
*/}}
{{- define "agentrl.clusterRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  resourceNames: ["rayjobs.ray.io"]
  verbs: ["get"]
{{- if .Values.watchNamespaces }}
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list", "watch"]
{{- end }}
{{- end }}

{{/*
An alert's labels: the chart's (`base`) merged with monitoring.prometheusRule.alertLabels
(`extra`), whose values win, so each key appears once.
*/}}
{{- define "agentrl.alertLabels" -}}
{{- toYaml (mergeOverwrite .base (.extra | default dict)) }}
{{- end }}

{{/* A map as sorted `k=v,k2=v2` (the operator's AGENTRL_EXTRA_LABELS format). */}}
{{- define "agentrl.keyValues" -}}
{{- $items := list }}
{{- range $k, $v := . }}
{{- $items = append $items (printf "%s=%s" $k $v) }}
{{- end }}
{{- join "," $items }}
{{- end }}

{{/*
Leader election settings the operator would refuse at start, refused at render time instead,
with the fix: several replicas without election would all reconcile and write status, and
the durations must satisfy client-go's rules (lease > renew deadline > 1.2 x retry period).
*/}}
{{- define "agentrl.checkLeaderElection" -}}
{{- $le := .Values.leaderElection }}
{{- if and (gt (int .Values.replicaCount) 1) (not $le.enabled) }}
{{- fail (printf "replicaCount=%d needs leaderElection.enabled=true: without it every replica would reconcile and write status. Enable leader election, or set replicaCount=1" (int .Values.replicaCount)) }}
{{- end }}
{{- if $le.enabled }}
{{- if not (gt (float64 $le.leaseDurationSeconds) (float64 $le.renewDeadlineSeconds)) }}
{{- fail (printf "leaderElection.leaseDurationSeconds (%v) must be greater than leaderElection.renewDeadlineSeconds (%v): the leader must stop before a standby may take over" $le.leaseDurationSeconds $le.renewDeadlineSeconds) }}
{{- end }}
{{- if not (gt (float64 $le.renewDeadlineSeconds) (mulf 1.2 $le.retryPeriodSeconds)) }}
{{- fail (printf "leaderElection.renewDeadlineSeconds (%v) must be greater than 1.2 x leaderElection.retryPeriodSeconds (%v): the leader needs more than one jittered retry to renew" $le.renewDeadlineSeconds $le.retryPeriodSeconds) }}
{{- end }}
{{- end }}
{{- end }}
