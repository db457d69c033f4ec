// Load without loss, in small: the soak (bench/soak.ts) found that past 20,000 records GET
// /for_store/tool_records reports a `total` smaller than the number of calls and cannot page to the
// older records, although every record is in the file and in `summary`. The query only looks at the
// in-memory window. Shown here with a window of 50 records and 120 calls.
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { ToolRecords, type NewRecord } from "../../src/records/tool-records.js"

/** The records file of the services file mcp.json (recordsFileFor). */
const RECORDS_FILE = "mcp.records.jsonl"

let dir: string | undefined
let records: ToolRecords | undefined
afterEach(async () => {
  await records?.close()
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true })
  records = dir = undefined
})

const call = (i: number): NewRecord => ({
  scope: "store",
  agent_id: null,
  service_name: i % 2 === 0 ? "even" : "odd",
  tool_name: "echo",
  params: { i },
  result: `r${i}`,
  outcome: "success",
  error: null,
  duration_ms: 1,
  trace_id: `t${i}`
})

describe("tool records beyond the in-memory window", () => {
  it("total counts every matching record, and every record can be paged to", { timeout: 10_000 }, async () => {
    dir = mkdtempSync(join(tmpdir(), "mcp-store-records-"))
    records = await ToolRecords.open(join(dir, "mcp.json"), { maxFileSizeMb: -1, retentionDays: -1, memoryLimit: 50 })
    for (let i = 0; i < 120; i++) await records.append(call(i))

    const lines = readFileSync(join(dir, RECORDS_FILE), "utf8").trim().split("\n")
    expect(lines).toHaveLength(120)
    expect(records.summary().total_executions).toBe(120)

    // `await`: the query may need the file (a fix may make it asynchronous); awaiting a plain value is harmless.
    expect((await records.query({ limit: 1 })).total).toBe(120)
    expect((await records.query({ service_name: "even", limit: 1 })).total).toBe(60)
    // The oldest page: newest first, so offset 100 holds calls 19 ... 0.
    const oldest = await records.query({ limit: 50, offset: 100 })
    expect(oldest.executions.map((r) => (r.params as { i: number }).i)).toEqual(Array.from({ length: 20 }, (_, k) => 19 - k))
  })
})
