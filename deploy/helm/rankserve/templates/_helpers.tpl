{{/* Names and labels. */}}
{{- define "rankserve.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "rankserve.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "rankserve.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "rankserve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component ("api", "worker"): call with (list $ "api"). */}}
{{- define "rankserve.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "rankserve.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Labels of a component's pods: its selector labels and the chart's other labels. */}}
{{- define "rankserve.podLabels" -}}
{{- $root := index . 0 -}}
{{ include "rankserve.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
{{- end -}}

{{- define "rankserve.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "rankserve.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "rankserve.secretName" -}}
{{- default (printf "%s-tokens" (include "rankserve.fullname" .)) .Values.secrets.existingSecret -}}
{{- end -}}

{{- define "rankserve.storeClaim" -}}
{{- default (printf "%s-store" (include "rankserve.fullname" .)) .Values.store.persistence.existingClaim -}}
{{- end -}}

{{/* The image of a component: the GPU build when the switch is on for it. */}}
{{- define "rankserve.image" -}}
{{- $root := index . 0 -}}
{{- $gpu := index . 1 -}}
{{- if $gpu -}}
{{- printf "%s:%s" (default $root.Values.image.repository $root.Values.gpu.image.repository) $root.Values.gpu.image.tag -}}
{{- else -}}
{{- printf "%s:%s" $root.Values.image.repository $root.Values.image.tag -}}
{{- end -}}
{{- end -}}

{{/*
The API's memory: baseGiB + 2 x (modelGiB + indexGiB + rankStoreGiB), in MiB rounded up.
During a hot swap the old and the new engine, index and rank store live side by side
(service/swap.py).
*/}}
{{- define "rankserve.apiMemory" -}}
{{- $m := .Values.api.memory -}}
{{- $gib := addf $m.baseGiB (mulf 2 (addf $m.modelGiB $m.indexGiB $m.rankStoreGiB)) -}}
{{- printf "%dMi" (int (ceil (mulf $gib 1024))) -}}
{{- end -}}

{{/* Environment shared by the API and the worker: settings, tokens, store credentials. */}}
{{- define "rankserve.env" -}}
- name: RANKSERVE_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "rankserve.secretName" . }}
      key: api-key
      optional: true
- name: RANKSERVE_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "rankserve.secretName" . }}
      key: admin-token
      optional: true
{{- if .Values.redis.urlSecret.name }}
- name: RANKSERVE_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.urlSecret.name }}
      key: {{ .Values.redis.urlSecret.key }}
{{- end }}
{{- if and .Values.store.url .Values.store.s3.credentialsSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ .Values.store.s3.credentialsSecret }}
      key: AWS_ACCESS_KEY_ID
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.store.s3.credentialsSecret }}
      key: AWS_SECRET_ACCESS_KEY
{{- end }}
{{- end -}}

{{/* Volumes and mounts shared by the API and the worker. */}}
{{- define "rankserve.volumes" -}}
- name: var
  emptyDir:
    sizeLimit: {{ .Values.var.sizeLimit }}
{{- if not .Values.store.url }}
- name: store
  persistentVolumeClaim:
    claimName: {{ include "rankserve.storeClaim" . }}
{{- end }}
{{- end -}}

{{- define "rankserve.volumeMounts" -}}
- name: var
  mountPath: /app/var
{{- if not .Values.store.url }}
- name: store
  mountPath: /store
{{- end }}
{{- end -}}

{{/* nodeSelector and tolerations of a component, with the GPU node's when the switch is on. */}}
{{- define "rankserve.scheduling" -}}
{{- $root := index . 0 -}}
{{- $values := index . 1 -}}
{{- $gpu := index . 2 -}}
{{- $nodeSelector := $values.nodeSelector -}}
{{- $tolerations := $values.tolerations -}}
{{- if $gpu -}}
{{- $nodeSelector = merge (deepCopy $values.nodeSelector) $root.Values.gpu.nodeSelector -}}
{{- $tolerations = concat $values.tolerations $root.Values.gpu.tolerations -}}
{{- end -}}
{{- with $nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
