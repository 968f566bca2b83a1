{{/* Chart name, possibly overridden. */}}
{{- define "queuepilot.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-scoped base name: <release> or <release>-queuepilot, at most 40 characters so that
     "<fullname>-controller-webhook" and friends stay within 63. */}}
{{- define "queuepilot.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "queuepilot.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels common to every object. */}}
{{- define "queuepilot.labels" -}}
helm.sh/chart: {{ include "queuepilot.chart" . }}
app.kubernetes.io/name: {{ include "queuepilot.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: queuepilot
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "exporter"). */}}
{{- define "queuepilot.selectorLabels" -}}
app.kubernetes.io/name: {{ include "queuepilot.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "queuepilot.componentLabels" -}}
{{ include "queuepilot.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Label selector string for the exporter pods (the controller's --exporter-selector). */}}
{{- define "queuepilot.exporterSelector" -}}
app.kubernetes.io/name={{ include "queuepilot.name" . }},app.kubernetes.io/instance={{ .Release.Name }},app.kubernetes.io/component=exporter
{{- end -}}

{{- define "queuepilot.exporter.fullname" -}}{{ include "queuepilot.fullname" . }}-exporter{{- end -}}
{{- define "queuepilot.controller.fullname" -}}{{ include "queuepilot.fullname" . }}-controller{{- end -}}
{{- define "queuepilot.webhook.fullname" -}}{{ include "queuepilot.fullname" . }}-webhook{{- end -}}

{{- define "queuepilot.exporter.serviceAccountName" -}}
{{- if .Values.exporter.serviceAccount.create -}}
{{- default (include "queuepilot.exporter.fullname" .) .Values.exporter.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.exporter.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "queuepilot.controller.serviceAccountName" -}}
{{- if .Values.controller.serviceAccount.create -}}
{{- default (include "queuepilot.controller.fullname" .) .Values.controller.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.controller.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image reference; the tag defaults to the chart's appVersion. A digest wins over the tag. */}}
{{- define "queuepilot.image" -}}
{{- $img := .Values.image -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{/* The AdmissionCheck controllerName the controller answers for (autoscaler/policy/config.py). */}}
{{- define "queuepilot.controllerName" -}}
{{- $adm := (.Values.config | default dict).admission | default dict -}}
{{- default "queuepilot.io/gpu-capacity" $adm.controller_name -}}
{{- end -}}

{{/* "true" when the queue-name webhook is served and registered: enabled and something to map. */}}
{{- define "queuepilot.webhook.active" -}}
{{- $wh := (.Values.config | default dict).webhook | default dict -}}
{{- if and .Values.webhook.enabled $wh.namespace_queues -}}true{{- end -}}
{{- end -}}

{{/* Where the webhook's TLS Secret lives (cert-manager's or the chart's own). */}}
{{- define "queuepilot.webhook.secretName" -}}{{ include "queuepilot.webhook.fullname" . }}-tls{{- end -}}

{{/* The Prometheus job names the generated alert rules select (alerts/config.py defaults). */}}
{{- define "queuepilot.exporter.job" -}}{{ .Values.monitoring.jobNames.exporter }}{{- end -}}
{{- define "queuepilot.controller.job" -}}{{ .Values.monitoring.jobNames.controller }}{{- end -}}

{{/* Whether the Prometheus operator's kinds may be rendered. */}}
{{- define "queuepilot.monitoring.scrapeKind" -}}
{{- $m := .Values.monitoring -}}
{{- if and $m.enabled (.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" $m.kind)) -}}{{ $m.kind }}{{- end -}}
{{- end -}}
