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

{{/*
The refresher's pods: a name of their own, so that neither the server's Deployment, its
Service nor its PodDisruptionBudget selects them.
*/}}
{{- define "lakeshare.refresherSelectorLabels" -}}
app.kubernetes.io/name: {{ include "lakeshare.name" . }}-refresher
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: refresher
{{- end -}}

{{- define "lakeshare.refresherName" -}}
{{- printf "%s-refresher" (include "lakeshare.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Where copies and views are materialized when views.location is empty: a claim the
refresher writes and the server reads, mounted at this path.
*/}}
{{- define "lakeshare.viewsDir" -}}
/var/lib/lakeshare/views
{{- end -}}

{{- define "lakeshare.viewsOnClaim" -}}
{{- if and .Values.refresher.enabled .Values.refresher.persistence.enabled (not (.Values.views | default dict).location) -}}
true
{{- end -}}
{{- end -}}

{{- define "lakeshare.viewsClaimName" -}}
{{- .Values.refresher.persistence.existingClaim | default (printf "%s-views" (include "lakeshare.fullname" .)) -}}
{{- end -}}

{{/*
The refresher shares a single-node claim with the server (the SQLite store, a
ReadWriteOnce views or data claim): it must run on the server's node.
*/}}
{{- define "lakeshare.refresherOnServerNode" -}}
{{- $sharedData := and .Values.data.enabled (not (or (has "ReadOnlyMany" .Values.data.accessModes) (has "ReadWriteMany" .Values.data.accessModes))) -}}
{{- $sharedViews := and (include "lakeshare.viewsOnClaim" .) (not (has "ReadWriteMany" .Values.refresher.persistence.accessModes)) -}}
{{- if or (include "lakeshare.storeOnClaim" .) $sharedData $sharedViews -}}
true
{{- end -}}
{{- end -}}
