{{- define "lakeshare.name" -}}
{{- .Values.nameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "lakeshare.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "lakeshare.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "lakeshare.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lakeshare.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "lakeshare.labels" -}}
{{ include "lakeshare.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "lakeshare.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "lakeshare.fullname" .) -}}
{{- end -}}

{{- define "lakeshare.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "lakeshare.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "lakeshare.claimName" -}}
{{- .Values.data.existingClaim | default (printf "%s-data" (include "lakeshare.fullname" .)) -}}
{{- end -}}

{{- define "lakeshare.storeClaimName" -}}
{{- .Values.store.persistence.existingClaim | default (printf "%s-store" (include "lakeshare.fullname" .)) -}}
{{- end -}}

{{/*
Where the SQLite state store lives when no PostgreSQL URL is given (a volume of the pod).
*/}}
{{- define "lakeshare.storeDir" -}}
/var/lib/lakeshare/store
{{- end -}}

{{/*
The store's PersistentVolumeClaim, when the chart keeps an SQLite store on one.
*/}}
{{- define "lakeshare.storeOnClaim" -}}
{{- if and (not .Values.store.urlSecret.name) .Values.store.persistence.enabled -}}
true
{{- end -}}
{{- end -}}

{{/*
Several replicas must share one store: each pod's SQLite file would hold its own recipients.
*/}}
{{- define "lakeshare.checkStore" -}}
{{- if and (not .Values.store.urlSecret.name) (gt (int .Values.replicaCount) 1) -}}
{{- fail "replicaCount > 1 needs store.urlSecret: a PostgreSQL URL every replica shares (an SQLite store per pod would hold different recipients)" -}}
{{- end -}}
{{- end -}}

{{/*
The URL recipients reach the server at: publicUrl, else the first Ingress host (https when
a tls entry names it), else empty (the server derives it from each request).
*/}}
{{- define "lakeshare.publicUrl" -}}
{{- if .Values.publicUrl -}}
{{- .Values.publicUrl -}}
{{- else if and .Values.ingress.enabled .Values.ingress.hosts -}}
{{- $host := (first .Values.ingress.hosts).host -}}
{{- if $host -}}
{{- $scheme := "http" -}}
{{- range .Values.ingress.tls -}}
{{- if has $host (.hosts | default list) -}}
{{- $scheme = "https" -}}
{{- end -}}
{{- end -}}
{{- printf "%s://%s" $scheme $host -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
A created claim must be mountable by every replica: ReadWriteOnce (one node) and
ReadWriteOncePod (one pod) are refused with several replicas.
*/}}
{{- define "lakeshare.checkData" -}}
{{- if and .Values.data.enabled (not .Values.data.existingClaim) (gt (int .Values.replicaCount) 1) -}}
{{- if not (or (has "ReadOnlyMany" .Values.data.accessModes) (has "ReadWriteMany" .Values.data.accessModes)) -}}
{{- fail "replicaCount > 1 with a data volume needs data.accessModes ReadOnlyMany or ReadWriteMany (or data.existingClaim, or data.enabled=false when every table is in the cloud)" -}}
{{- end -}}
{{- end -}}
{{- end -}}
