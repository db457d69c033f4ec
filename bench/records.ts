/**
 * Benchmark of the tool-call record file ("appending must not slow down as the
 * file grows"): the append rate and latency with an empty file and with 200,000 records already in
 * it, side by side. Bounded in time (well under a minute); results go to stdout only.
 *
 *   npx tsx bench/records.ts [--records 200000] [--seconds 2] [--rounds 2]
 *
 * Two ways of appending are measured in each case: one call at a time (each append awaited, as a
 * lone caller sees it: p50/p99 latency and rate) and bursts of 100 concurrent calls (the group
 * commit: rate). Size limit and retention are off, so only appending is measured. The two cases
 * alternate for `rounds` rounds and the best figure of each is shown.
 */
import { mkdtempSync, rmSync, statSync } from "node:fs"
import { open as openFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { parseArgs } from "node:util"
import { ToolRecords, type NewRecord } from "../src/records/tool-records.js"

/** The records file of the services file mcp.json (recordsFileFor). */
const RECORDS_FILE = "mcp.records.jsonl"

const { values } = parseArgs({
  options: {
    records: { type: "string", default: "200000" },
    seconds: { type: "string", default: "2" },
    rounds: { type: "string", default: "2" }
  },
  strict: true
})
const PRESENT = Number(values.records)
const PHASE_MS = Number(values.seconds) * 1000
const ROUNDS = Number(values.rounds)
const MAX_APPENDS = 100_000
const BURST = 100

let n = 0
const newRecord = (): NewRecord => ({
  scope: n % 4 === 0 ? "agent" : "store",
  agent_id: n % 4 === 0 ? "agent-1" : null,
  service_name: `service-${n % 7}`,
  tool_name: `tool_${n % 13}`,
  params: { text: "hello world", n },
  result: { content: "a result of moderate size ".repeat(8) },
  outcome: n % 10 === 0 ? "tool_error" : "success",
  error: n % 10 === 0 ? "the tool failed" : null,
  duration_ms: 12.5,
  trace_id: `trace-${n++}`
})

/** Writes `count` record lines straight into the file (much faster than appending them one by one). */
const prefill = async (file: string, count: number) => {
  const handle = await openFile(file, "w")
  const start = Date.now() - 60 * 60_000
  const chunk: string[] = []
  for (let i = 0; i < count; i++) {
    chunk.push(`${JSON.stringify({ id: `pre-${i}`, timestamp: new Date(start + i * 10).toISOString(), ...newRecord() })}\n`)
    if (chunk.length === 10_000) {
      await handle.write(chunk.join(""))
      chunk.length = 0
    }
  }
  if (chunk.length > 0) await handle.write(chunk.join(""))
  await handle.close()
}

const percentile = (sorted: ReadonlyArray<number>, p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0

interface Figures {
  readonly openMs: number
  readonly fileMb: number
  readonly seqRate: number
  readonly p50: number
  readonly p99: number
  readonly seqCount: number
  readonly burstRate: number
  readonly burstCount: number
}

const measure = async (present: number): Promise<Figures> => {
  const dir = mkdtempSync(join(tmpdir(), "mcp-store-bench-"))
  try {
    const servicesFile = join(dir, "mcp.json")
    if (present > 0) await prefill(join(dir, RECORDS_FILE), present)
    const t0 = performance.now()
    const records = await ToolRecords.open(servicesFile, { maxFileSizeMb: -1, retentionDays: -1 })
    const openMs = performance.now() - t0

    // Warm-up of both ways of appending.
    for (let i = 0; i < 500; i++) await records.append(newRecord())
    for (let i = 0; i < 20; i++) await Promise.all(Array.from({ length: BURST }, () => records.append(newRecord())))

    // One at a time.
    const latencies: number[] = []
    let start = performance.now()
    while (performance.now() - start < PHASE_MS && latencies.length < MAX_APPENDS) {
      const s = performance.now()
      await records.append(newRecord())
      latencies.push(performance.now() - s)
    }
    const seqSeconds = (performance.now() - start) / 1000
    latencies.sort((a, b) => a - b)

    // Bursts of concurrent appends.
    let burstCount = 0
    start = performance.now()
    while (performance.now() - start < PHASE_MS && burstCount < MAX_APPENDS) {
      await Promise.all(Array.from({ length: BURST }, () => records.append(newRecord())))
      burstCount += BURST
    }
    const burstSeconds = (performance.now() - start) / 1000

    await records.close()
    return {
      openMs,
      fileMb: statSync(join(dir, RECORDS_FILE)).size / (1024 * 1024),
      seqRate: latencies.length / seqSeconds,
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      seqCount: latencies.length,
      burstRate: burstCount / burstSeconds,
      burstCount
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

/** The best of each figure over the rounds (the machine's noise only ever makes a figure worse). */
const best = (runs: ReadonlyArray<Figures>): Figures => ({
  openMs: Math.min(...runs.map((r) => r.openMs)),
  fileMb: Math.max(...runs.map((r) => r.fileMb)),
  seqRate: Math.max(...runs.map((r) => r.seqRate)),
  p50: Math.min(...runs.map((r) => r.p50)),
  p99: Math.min(...runs.map((r) => r.p99)),
  seqCount: Math.max(...runs.map((r) => r.seqCount)),
  burstRate: Math.max(...runs.map((r) => r.burstRate)),
  burstCount: Math.max(...runs.map((r) => r.burstCount))
})

// Alternate the two cases, so warm-up and background load do not favour either.
const emptyRuns: Figures[] = []
const fullRuns: Figures[] = []
for (let round = 0; round < ROUNDS; round++) {
  emptyRuns.push(await measure(0))
  fullRuns.push(await measure(PRESENT))
}
const empty = best(emptyRuns)
const full = best(fullRuns)

const rows: Array<[string, (f: Figures) => number, number]> = [
  ["open (rebuild aggregates), ms", (f) => f.openMs, 1],
  ["appends, one at a time (count)", (f) => f.seqCount, 0],
  ["  rate, records/s", (f) => f.seqRate, 0],
  ["  p50 latency, ms", (f) => f.p50, 3],
  ["  p99 latency, ms", (f) => f.p99, 3],
  [`appends, bursts of ${BURST} (count)`, (f) => f.burstCount, 0],
  ["  rate, records/s", (f) => f.burstRate, 0],
  ["file size at the end, MB", (f) => f.fileMb, 1]
]
const fmt = (v: number, digits: number) => v.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits })
const table = rows.map(([label, get, digits]) => {
  const a = get(empty)
  const b = get(full)
  return [label, fmt(a, digits), fmt(b, digits), a === 0 ? "-" : `${(b / a).toFixed(2)}x`]
})
const header = ["", "empty file", `${PRESENT.toLocaleString("en-US")} records`, "ratio"]
const widths = header.map((h, i) => Math.max(h.length, ...table.map((r) => r[i]!.length)))
const print = (r: ReadonlyArray<string>) => console.log(r.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  "))
console.log(
  `ToolRecords append benchmark (node ${process.version}, ${Number(values.seconds)} s per phase, best of ${ROUNDS} rounds; ratio = with records / empty)`
)
print(header)
print(widths.map((w) => "-".repeat(w)))
for (const r of table) print(r)
