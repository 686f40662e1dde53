{{- define "lakeshare.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "lakeshare.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "lakeshare.labels" -}}
{{ include "lakeshare.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "lakeshare.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "lakeshare.fullname" .) -}}
{{- end -}}

{{- define "lakeshare.claimName" -}}
{{- .Values.tables.existingClaim | default (printf "%s-tables" (include "lakeshare.fullname" .)) -}}
{{- end -}}
