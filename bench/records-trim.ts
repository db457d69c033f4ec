/**
 * What the records file's size limit costs a busy store (src/records/tool-records.ts): appends of
 * tool-call records to a file kept at its limit, which is trimmed to 80 % each time it is passed,
 * against appends to a file without a limit. Given the root of a checkout, it runs that checkout's
 * records module, so two builds are compared in one run. Run by hand:
 * `npx tsx bench/records-trim.ts [root of a checkout, default .] [limit in MB, default 5; -1: none]`.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"

const root = resolve(process.argv[2] ?? ".")
const limitMb = Number(process.argv[3] ?? 5)
const { ToolRecords } = (await import(join(root, "src/records/tool-records.ts"))) as typeof import("../src/records/tool-records.js")
const dir = mkdtempSync(join(tmpdir(), "records-trim-"))
const records = await ToolRecords.open(join(dir, "mcp.json"), { maxFileSizeMb: limitMb, retentionDays: -1 })
const record = (n: number) => ({
  scope: "store" as const,
  agent_id: null,
  service_name: "svc",
  tool_name: `t${n % 7}`,
  params: { n, text: "hello world" },
  result: `result ${n} ${"x".repeat(150)}`,
  outcome: "success" as const,
  error: null,
  duration_ms: n % 100,
  trace_id: `t-${n}`
})
let n = 0
// Filled to the limit first (about 22,000 records of about 240 bytes for 5 MB).
for (; n < 22_000; n++) await records.append(record(n))
const count = 40_000
const cpu = process.cpuUsage()
const started = performance.now()
for (let i = 0; i < count; i++, n++) await records.append(record(n))
const used = process.cpuUsage(cpu)
console.log(`${root} (limit ${limitMb} MB): ${count} appends past the fill: ${((used.user + used.system) / count).toFixed(1)} µs CPU, ${(((performance.now() - started) / count) * 1000).toFixed(1)} µs wall per append`)
await records.close()
rmSync(dir, { recursive: true, force: true })
