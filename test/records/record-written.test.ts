// ToolRecords.record, the call path's way to take a record: when it says the line is written
// (`written` undefined) the line is in the file already; while the file is being maintained the
// line waits, and `written` resolves only once it is in the file. A call's answer waits on exactly
// that (src/runtime/calls.ts), so an answer a client has seen has its record on disk.
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { ToolRecords } from "../../src/records/tool-records.js"
import { newRecord } from "../support/index.js"

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
