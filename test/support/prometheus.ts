/** The Prometheus text format as GET /metrics writes it, parsed into samples for assertions. */

/** One sample of a Prometheus text exposition. */
export interface Sample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

/** Parses the Prometheus text format (comments skipped). */
export const parsePrometheus = (text: string): Sample[] => {
  const out: Sample[] = []
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line)
    if (!m) continue
    const labels: Record<string, string> = {}
    for (const l of (m[3] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!.replace(/\\(.)/g, "$1")
    out.push({ name: m[1]!, labels, value: Number(m[4]) })
  }
  return out
}

/** The value of the sample with this name whose labels include `labels` (sum when several match; 0 when none). */
export const sampleValue = (samples: ReadonlyArray<Sample>, name: string, labels: Readonly<Record<string, string>> = {}): number =>
  samples
    .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((n, s) => n + s.value, 0)
