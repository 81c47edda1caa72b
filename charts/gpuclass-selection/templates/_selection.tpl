{{/*
gpuclass selection helpers (docs/contract.md section 2). Call each with a dict holding the tenant's list:

  metadata:
    annotations:
      {{- with include "gpuclass-selection.annotations" (dict "gpus" .Values.gpus) }}
      {{- . | nindent 6 }}
      {{- end }}
  ...
  domain:
    devices:
      {{- with include "gpuclass-selection.gpus" (dict "gpus" .Values.gpus) }}
      gpus:
        {{- . | nindent 8 }}
      {{- end }}

  * a list with className entries -> the annotation `gpu.cozystack.io/classes` holding the list as
    JSON, verbatim; no devices (the admission webhook resolves the classes);
  * a list of raw `name` entries -> `gpus` entries `{name: gpuN, deviceName: <name>}`, no annotation
    (the pre-catalog way, kept for existing applications);
  * an empty or absent list -> nothing;
  * anything else (mixed lists, an entry with both or neither key, `count` on a raw entry) -> the
    render fails with a message naming the entry. schema/gpus.schema.json says the same for
    values.schema.json.
*/}}

{{/* "class", "raw" or "none"; fails on a list that is neither. */}}
{{- define "gpuclass-selection.kind" -}}
{{- $gpus := .gpus | default list -}}
{{- if not (kindIs "slice" $gpus) -}}
{{- fail (printf "gpus must be a list of {className, count} or {name} entries, not %s" (kindOf $gpus)) -}}
{{- end -}}
{{- $classAt := list -}}
{{- $rawAt := list -}}
{{- range $i, $entry := $gpus -}}
{{- if not (kindIs "map" $entry) -}}
{{- fail (printf "gpus[%d] must be an object with className (a GPU class) or name (a raw resource name)" $i) -}}
{{- end -}}
{{- $hasClass := hasKey $entry "className" -}}
{{- $hasName := hasKey $entry "name" -}}
{{- if and $hasClass $hasName -}}
{{- fail (printf "gpus[%d] sets both className and name: choose one, a GPU class or a raw resource name" $i) -}}
{{- else if $hasClass -}}
{{- if not (and (kindIs "string" $entry.className) $entry.className) -}}
{{- fail (printf "gpus[%d].className must be a non-empty class name" $i) -}}
{{- end -}}
{{- $classAt = append $classAt $i -}}
{{- else if $hasName -}}
{{- if not (and (kindIs "string" $entry.name) $entry.name) -}}
{{- fail (printf "gpus[%d].name must be a non-empty resource name" $i) -}}
{{- end -}}
{{- if hasKey $entry "count" -}}
{{- fail (printf "gpus[%d]: count belongs to className entries only; repeat a raw name entry to request more" $i) -}}
{{- end -}}
{{- $rawAt = append $rawAt $i -}}
{{- else -}}
{{- fail (printf "gpus[%d] must set className (a GPU class) or name (a raw resource name)" $i) -}}
{{- end -}}
{{- end -}}
{{- if and $classAt $rawAt -}}
{{- fail (printf "gpus mixes className entries (gpus[%d]) and raw name entries (gpus[%d]): a list holds GPU classes or raw resource names, never both" (first $classAt) (first $rawAt)) -}}
{{- end -}}
{{- if $classAt -}}class{{- else if $rawAt -}}raw{{- else -}}none{{- end -}}
{{- end -}}

{{/* The selection annotation line, or nothing. The value is the list as JSON, quoted for YAML. */}}
{{- define "gpuclass-selection.annotations" -}}
{{- if eq (include "gpuclass-selection.kind" .) "class" -}}
gpu.cozystack.io/classes: {{ .gpus | toJson | toJson }}
{{- end -}}
{{- end -}}

{{/* KubeVirt spec.domain.devices.gpus entries for a raw list (gpu1 ... gpuN), or nothing. */}}
{{- define "gpuclass-selection.gpus" -}}
{{- if eq (include "gpuclass-selection.kind" .) "raw" -}}
{{- $devices := list -}}
{{- range $i, $entry := .gpus -}}
{{- $devices = append $devices (dict "name" (printf "gpu%d" (add1 $i)) "deviceName" $entry.name) -}}
{{- end -}}
{{- toYaml $devices -}}
{{- end -}}
{{- end -}}
