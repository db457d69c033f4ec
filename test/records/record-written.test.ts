// ToolRecords.record, the call path's way to take a record: when it says the line is written
// (`written` undefined) the line is in the file already; while the file is being maintained the
// line waits, and `written` resolves only once it is in the file. A call's answer waits on exactly
// that (src/runtime/calls.ts), so an answer a client has seen has its record on disk.
import { execFileSync } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { ToolRecords } from "../../src/records/tool-records.js"
import { newRecord, programArgs } from "../support/index.js"

/** The records file of the services file mcp.json (recordsFileFor). */
const RECORDS_FILE = "mcp.records.jsonl"

const dirs: string[] = []
const opened: ToolRecords[] = []
afterEach(async () => {
  await Promise.all(opened.splice(0).map((r) => r.close().catch(() => undefined)))
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true })
})

const open = async (options: { maxFileSizeMb?: number; retentionDays?: number } = {}) => {
  const dir = mkdtempSync(join(tmpdir(), "mcp-store-record-written-"))
  dirs.push(dir)
  const records = await ToolRecords.open(join(dir, "mcp.json"), { maxFileSizeMb: -1, retentionDays: -1, ...options })
  opened.push(records)
  return { records, file: () => readFileSync(join(dir, RECORDS_FILE), "utf8") }
}

const rec = newRecord

describe("ToolRecords.record", () => {
  it("writes the line at once when nothing else writes the file", async () => {
    const { records, file } = await open()
    for (let i = 0; i < 20; i++) {
      const { record, written } = records.record(rec())
      expect(written).toBeUndefined()
      expect(file()).toContain(record.id)
    }
  })

  it("while the file is maintained, the line waits and `written` resolves once it is in the file", async () => {
    const { records, file } = await open({ retentionDays: 30 })
    for (let i = 0; i < 5; i++) records.record(rec())
    const cleanup = records.cleanup()
    const taken = [records.record(rec()), records.record(rec())]
    for (const t of taken) {
      expect(t.written).toBeInstanceOf(Promise)
      expect(file()).not.toContain(t.record.id)
    }
    await Promise.all(taken.map((t) => t.written))
    for (const t of taken) expect(file()).toContain(t.record.id)
    await cleanup
    // Once the maintenance is over, lines are written at once again.
    const after = records.record(rec())
    expect(after.written).toBeUndefined()
    expect(file()).toContain(after.record.id)
  })

  it("over the size limit, `written` resolves once the oldest records are dropped", async () => {
    const { records, file } = await open({ maxFileSizeMb: 0.01 })
    let cut = false
    for (let i = 0; i < 60; i++) {
      const { record, written } = records.record(rec({ result: "x".repeat(400) }))
      if (written !== undefined) {
        cut = true
        await written
      }
      expect(file()).toContain(record.id)
      expect(Buffer.byteLength(file())).toBeLessThanOrEqual(0.01 * 1024 * 1024)
    }
    expect(cut).toBe(true)
  })
})

describe("a records file on a full disk", () => {
  it("a line refused part-way is cut back: the next records are whole lines, none joined to a torn one", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mcp-store-record-full-"))
    dirs.push(dir)
    // The writer (test/fixtures/records-writer.ts) from the fixtures' bundles: run by plain node, it
    // does not compile the sources through tsx at its start (about 2 s of CPU).
    const writer = programArgs("test/fixtures/records-writer.ts")
    // 8 KiB at most for the writer's files (ulimit -f counts KiB); SIGXFSZ ignored, so a write past it fails with EFBIG.
    const out = execFileSync("bash", ["-c", `ulimit -f 8; trap '' XFSZ; exec "$0" "$@"`, process.execPath, ...writer, dir], { encoding: "utf8", timeout: 30_000 })
    const result = JSON.parse(out) as { written: number; refused: number; small: string[] }
    expect(result.refused).toBe(1)
    expect(result.written).toBeGreaterThan(3)
    const lines = readFileSync(join(dir, RECORDS_FILE), "utf8").split("\n")
    expect(lines.at(-1)).toBe("")
    const ids = lines.slice(0, -1).map((l) => (JSON.parse(l) as { id: string }).id)
    expect(ids).toHaveLength(result.written + 2)
    expect(ids.slice(-2)).toEqual(result.small)
  })
})
