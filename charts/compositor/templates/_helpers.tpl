{{/* The name of namespaced objects: the release name, with the chart name unless it has it. */}}
{{- define "compositor.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
The name of cluster-scoped objects (and of the operator's Roles outside its namespace): release
namespace and name, so that two installations never share one. The prefix `compositor-operator:`
differs from the `compositor:` of the bundles the operator makes, which the admission policy
lets it write: the operator can never rewrite its own grants.
*/}}
{{- define "compositor.clusterName" -}}
{{- printf "compositor-operator:%s:%s" .Release.Namespace .Release.Name -}}
{{- end -}}

{{/* Admission policies are named like DNS subdomains: no colons. */}}
{{- define "compositor.policyName" -}}
{{- printf "compositor-operator.%s.%s" .Release.Namespace .Release.Name | trunc 253 | trimSuffix "." -}}
{{- end -}}

{{- define "compositor.serviceAccountName" -}}
{{- include "compositor.fullname" . -}}
{{- end -}}

{{/* The user name the apiserver gives the operator's requests. */}}
{{- define "compositor.username" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "compositor.serviceAccountName" .) -}}
{{- end -}}

{{- define "compositor.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The image of the per-version controllers. */}}
{{- define "compositor.controllerImage" -}}
{{- .Values.controllerImage | default (include "compositor.image" .) -}}
{{- end -}}

{{- define "compositor.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "compositor.labels" -}}
{{ include "compositor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Namespaces where the operator reads the Secrets and ConfigMaps that chart sources name. */}}
{{- define "compositor.credentialNamespaces" -}}
{{- $namespaces := list .Release.Namespace -}}
{{- with .Values.watchNamespace -}}
{{- $namespaces = append $namespaces . -}}
{{- end -}}
{{- $namespaces = concat $namespaces .Values.credentialNamespaces | uniq -}}
{{- toJson $namespaces -}}
{{- end -}}
