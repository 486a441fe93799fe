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

{{/* Labels on every object of the chart. */}}
{{- define "agentrl.labels" -}}
helm.sh/chart: {{ include "agentrl.chart" . }}
{{ include "agentrl.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agentrl
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of a monitoring object: chart labels + monitoring.additionalLabels + its own. */}}
{{- define "agentrl.monitoringLabels" -}}
{{ include "agentrl.labels" .root }}
{{- with .root.Values.monitoring.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The operator's ServiceAccount name. */}}
{{- define "agentrl.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "agentrl.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image: repository@digest when a digest is set (the default), else repository:tag. */}}
{{- define "agentrl.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* Prometheus Operator objects render only where their API is served, so a plain cluster still installs. */}}
{{- define "agentrl.hasMonitoringAPI" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{- end }}
{{- end }}

{{/*
The operator's namespaced permissions (operator-anchors §5), shared by the ClusterRole and
the per-namespace Roles. Exactly the calls the controller makes (operator/agentrl/controller:
kopf's watches, then get/create/patch in kube.py); nothing on secrets, no wildcards, no
update or delete anywhere: children are removed by the garbage collector through their
owner references, and users delete RLExperiments.
*/}}
{{- define "agentrl.namespacedRules" -}}
# The custom resource: kopf lists and watches it; the operator writes only its status.
- apiGroups: ["agentrl.io"]
  resources: ["rlexperiments"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["agentrl.io"]
  resources: ["rlexperiments/status"]
  verbs: ["get", "patch"]
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
# Runtime-config and bundle-code ConfigMaps and the gateway/metrics Service: created once
# (immutable in practice), read back on a name clash.
- apiGroups: [""]
  resources: ["configmaps", "services"]
  verbs: ["get", "create"]
# Ray pods: why they are stuck (ImagePullBackOff, Unschedulable); never exec, never write.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
# Events on RLExperiments: one new core/v1 Event per transition (never updated).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end }}

{{/* Cluster-scoped reads kopf needs wherever it runs: it watches CRDs to find its resources. */}}
{{- define "agentrl.clusterRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
{{- end }}

{{/* A map as sorted `k=v,k2=v2` (the operator's AGENTRL_EXTRA_LABELS format). */}}
{{- define "agentrl.keyValues" -}}
{{- $items := list }}
{{- range $k, $v := . }}
{{- $items = append $items (printf "%s=%s" $k $v) }}
{{- end }}
{{- join "," $items }}
{{- end }}
