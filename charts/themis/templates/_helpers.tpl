{{/* Names and labels shared by every template. */}}

{{- define "themis.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "themis.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "themis.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "themis.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "themis.operatorName" -}}
{{- printf "%s-operator" (include "themis.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "themis.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: themis
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "themis.operatorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "themis.name" . }}-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "themis.operatorLabels" -}}
{{ include "themis.labels" . }}
app.kubernetes.io/name: {{ include "themis.name" . }}-operator
app.kubernetes.io/component: operator
{{- end -}}

{{- define "themis.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "themis.operatorName" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "themis.operatorImage" -}}
{{- printf "%s:%s" .Values.operator.image.repository (default .Chart.AppVersion .Values.operator.image.tag) -}}
{{- end -}}

{{/* Namespaces the shards' ServiceMonitor scrapes. */}}
{{- define "themis.monitoredNamespaces" -}}
{{- if .Values.serviceMonitor.namespaces -}}
{{- toYaml .Values.serviceMonitor.namespaces -}}
{{- else -}}
{{- toYaml (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}
