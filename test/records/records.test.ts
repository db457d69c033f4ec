// ToolRecords on temporary folders: append, query and summary; records and aggregates survive a
// reopen (rebuilt from the file); a torn last line is skipped; retention at open and on cleanup();
// the size limit drops the oldest records until under 80 %; results over 64 KiB are cut; concurrent
// appends all land (also while the size limit rewrites the file); no temporary file is left behind;
// the file is private (0600, never looser) and never opened through a symlink.
import { chmodSync, lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { captureLogs } from "../../src/logging/log.js"
import { recordsFileFor, ToolRecords, type Outcome, type RecordsOptions } from "../../src/records/tool-records.js"
import { flush, newRecord } from "../support/index.js"

/** The records file of the services file mcp.json (recordsFileFor). */
const RECORDS_FILE = "mcp.records.jsonl"

const DAY = 86_400_000
const dirs: string[] = []
const opened: ToolRecords[] = []

const freshDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "mcp-store-records-"))
  dirs.push(dir)
  return dir
}
const open = async (dir: string, options: Partial<RecordsOptions> = {}) => {
  const records = await ToolRecords.open(join(dir, "mcp.json"), { maxFileSizeMb: -1, retentionDays: -1, ...options })
  opened.push(records)
  return records
}
const close = async (records: ToolRecords) => {
  await records.close()
  opened.splice(opened.indexOf(records), 1)
}
const fileOf = (dir: string) => join(dir, RECORDS_FILE)
const lines = (dir: string) => readFileSync(fileOf(dir), "utf8").split("\n").filter((l) => l !== "")
const parsedLines = (dir: string) => lines(dir).map((l) => JSON.parse(l) as { id: string; timestamp: string })

const rec = newRecord
let lineSeq = 0
/** A full record line as the file holds it (for files written by hand). */
const line = (over: Record<string, unknown> = {}) =>
  JSON.stringify({ id: `id-${lineSeq++}`, timestamp: new Date().toISOString(), ...rec(), ...over })

afterEach(async () => {
  await Promise.all(opened.splice(0).map((r) => r.close().catch(() => undefined)))
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true })
})

describe("ToolRecords", () => {
  it("keeps the records of a services file beside it, named after it: two services files in one folder keep theirs apart", async () => {
    expect(recordsFileFor("/srv/app/mcp.json")).toBe("/srv/app/mcp.records.jsonl")
    expect(recordsFileFor("/srv/app/team.jsonc")).toBe("/srv/app/team.records.jsonl")
    expect(recordsFileFor("/srv/app/services")).toBe("/srv/app/services.records.jsonl")
    const dir = freshDir()
    const a = await ToolRecords.open(join(dir, "a.json"), { maxFileSizeMb: -1, retentionDays: -1 })
    opened.push(a)
    const b = await ToolRecords.open(join(dir, "b.json"), { maxFileSizeMb: -1, retentionDays: -1 })
    opened.push(b)
    await a.append(rec({ service_name: "only-a" }))
    await close(a)
    await close(b)
    expect(readdirSync(dir).sort()).toEqual(["a.records.jsonl", "b.records.jsonl"])
    expect(readFileSync(join(dir, "a.records.jsonl"), "utf8")).toContain("only-a")
    expect(readFileSync(join(dir, "b.records.jsonl"), "utf8")).toBe("")
  })

  it("appends, queries newest first with filters and paging, and summarises per scope", async () => {
    const dir = freshDir()
    const records = await open(dir)
    const t0 = Date.now()
    const appended = []
    appended.push(await records.append(rec({ timestamp: new Date(t0 - 3000).toISOString() })))
    appended.push(await records.append(rec({ tool_name: "add", duration_ms: 30, timestamp: new Date(t0 - 2000).toISOString() })))
    appended.push(await records.append(rec({ service_name: "other", outcome: "tool_error", error: "boom", timestamp: new Date(t0 - 1000).toISOString() })))
    appended.push(await records.append(rec({ scope: "agent", agent_id: "a1", timestamp: new Date(t0).toISOString() })))
    for (const r of appended) {
      expect(typeof r.id).toBe("string")
      expect(r.timestamp).toMatch(/Z$/)
    }
    expect(new Set(appended.map((r) => r.id)).size).toBe(4)
    expect(lines(dir)).toHaveLength(4)

    const store = (await records.query({ scope: "store" }))
    expect(store.total).toBe(3)
    expect(store.executions.map((r) => r.id)).toEqual([appended[2]!.id, appended[1]!.id, appended[0]!.id])
    expect((await records.query({})).total).toBe(4)
    expect((await records.query({ scope: "a1" })).executions.map((r) => r.id)).toEqual([appended[3]!.id])
    expect((await records.query({ scope: "store", service_name: "other" })).executions.map((r) => r.id)).toEqual([appended[2]!.id])
    expect((await records.query({ scope: "store", tool_name: "add" })).executions.map((r) => r.id)).toEqual([appended[1]!.id])
    expect((await records.query({ outcome: "tool_error" })).total).toBe(1)
    expect((await records.query({ since: t0 - 1500 })).executions.map((r) => r.id)).toEqual([appended[3]!.id, appended[2]!.id])
    const page = (await records.query({ scope: "store", limit: 1, offset: 1 }))
    expect(page).toEqual({ executions: [appended[1]], total: 3 })

    const summary = records.summary(["store"])
    expect(summary).toMatchObject({ total_executions: 3, succeeded: 2, failed: 1, avg_duration_ms: 16.67 })
    expect(summary.by_tool).toEqual({
      svc__echo: { count: 1, errors: 0, avg_duration_ms: 10 },
      svc__add: { count: 1, errors: 0, avg_duration_ms: 30 },
      other__echo: { count: 1, errors: 1, avg_duration_ms: 10 }
    })
    expect(summary.by_service).toEqual({
      svc: { count: 2, errors: 0, avg_duration_ms: 20 },
      other: { count: 1, errors: 1, avg_duration_ms: 10 }
    })
    expect(records.summary().total_executions).toBe(4)
    expect(records.summary(["a1"])).toMatchObject({ total_executions: 1, by_service: { svc: { count: 1 } } })
    expect(records.summary(["nobody"])).toMatchObject({ total_executions: 0, avg_duration_ms: 0, by_tool: {}, by_service: {} })
  })

  it("records and aggregates survive a reopen: rebuilt from the file", async () => {
    const dir = freshDir()
    const first = await open(dir)
    const outcomes: Outcome[] = ["success", "tool_error", "timeout", "success", "transport_error"]
    for (const [i, outcome] of outcomes.entries()) {
      await first.append(rec({ outcome, scope: i % 2 === 0 ? "store" : "agent", agent_id: i % 2 === 0 ? null : "a1", duration_ms: i * 5 }))
    }
    const before = { all: first.summary(), store: first.summary(["store"]), agent: first.summary(["a1"]), query: (await first.query({ limit: 100 })) }
    await close(first)

    const second = await open(dir)
    expect(second.summary()).toEqual(before.all)
    expect(second.summary(["store"])).toEqual(before.store)
    expect(second.summary(["a1"])).toEqual(before.agent)
    expect((await second.query({ limit: 100 }))).toEqual(before.query)
    // Appending goes on after the reopened records.
    const more = await second.append(rec())
    expect((await second.query({ limit: 1 })).executions[0]!.id).toBe(more.id)
    expect(lines(dir)).toHaveLength(6)
  })

  it("skips a torn last line (a crash mid-write) and repairs the file so the next append is readable", async () => {
    const dir = freshDir()
    const good = [line(), line(), line()]
    writeFileSync(fileOf(dir), `${good.join("\n")}\n${line().slice(0, 40)}`)
    const records = await open(dir)
    expect(records.summary().total_executions).toBe(3)
    expect((await records.query({ limit: 10 })).total).toBe(3)
    const appended = await records.append(rec())
    await close(records)
    // Every line of the file is a record, the new one included.
    const ids = parsedLines(dir).map((r) => r.id)
    expect(ids).toHaveLength(4)
    expect(ids.at(-1)).toBe(appended.id)
    const again = await open(dir)
    expect(again.summary().total_executions).toBe(4)
  })

  it("retention drops old records at open; -1 keeps them all", async () => {
    const dir = freshDir()
    const now = Date.now()
    const old = [line({ id: "old-1", timestamp: new Date(now - 10 * DAY).toISOString() }), line({ id: "old-2", timestamp: new Date(now - 8 * DAY).toISOString() })]
    const recent = [line({ id: "new-1", timestamp: new Date(now - 6 * DAY).toISOString() }), line({ id: "new-2", timestamp: new Date(now - 1000).toISOString() })]
    const text = `${[...old, ...recent].join("\n")}\n`
    writeFileSync(fileOf(dir), text)

    const keepAll = await open(dir, { retentionDays: -1 })
    expect(keepAll.summary().total_executions).toBe(4)
    await close(keepAll)
    expect(readFileSync(fileOf(dir), "utf8")).toBe(text)

    const week = await open(dir, { retentionDays: 7 })
    expect(week.summary().total_executions).toBe(2)
    expect((await week.query({ limit: 10 })).executions.map((r) => r.id)).toEqual(["new-2", "new-1"])
    expect(parsedLines(dir).map((r) => r.id)).toEqual(["new-1", "new-2"])
    expect(week.daily(7).reduce((n, d) => n + d.calls, 0)).toBe(2)
  })

  it("cleanup() drops records that grew older than the retention; -1 never drops", async () => {
    const dir = freshDir()
    const records = await open(dir, { retentionDays: 7 })
    const now = Date.now()
    await records.append(rec({ timestamp: new Date(now - 9 * DAY).toISOString(), trace_id: "stale" }))
    await records.append(rec({ timestamp: new Date(now - 2 * DAY).toISOString() }))
    await records.append(rec())
    expect(records.summary().total_executions).toBe(3)
    expect(await records.cleanup()).toBe(1)
    expect(records.summary().total_executions).toBe(2)
    expect((await records.query({ limit: 10 })).executions.some((r) => r.trace_id === "stale")).toBe(false)
    expect(lines(dir)).toHaveLength(2)
    expect(await records.cleanup()).toBe(0)
    // Appends after a clean-up still land in the (renamed) file.
    await records.append(rec())
    expect(lines(dir)).toHaveLength(3)

    const dir2 = freshDir()
    const never = await open(dir2, { retentionDays: -1 })
    await never.append(rec({ timestamp: new Date(now - 400 * DAY).toISOString() }))
    expect(await never.cleanup()).toBe(0)
    expect(never.summary().total_executions).toBe(1)
    expect(lines(dir2)).toHaveLength(1)
  })

  it("the size limit drops the oldest records until the file is under 80 % of it", async () => {
    const dir = freshDir()
    const limitMb = 0.02 // 20,971 bytes
    const limit = limitMb * 1024 * 1024
    const records = await open(dir, { maxFileSizeMb: limitMb })
    const ids: string[] = []
    let enforced = 0
    let previous = 0
    for (let i = 0; i < 120; i++) {
      const r = await records.append(rec({ result: "x".repeat(400) }))
      ids.push(r.id)
      const size = statSync(fileOf(dir)).size
      expect(size).toBeLessThanOrEqual(limit)
      if (size < previous) {
        enforced += 1
        expect(size).toBeLessThanOrEqual(limit * 0.8)
      }
      previous = size
    }
    expect(enforced).toBeGreaterThan(0)
    // The newest records are kept, in order, and the aggregates agree with the file.
    const kept = parsedLines(dir).map((r) => r.id)
    expect(kept).toEqual(ids.slice(ids.length - kept.length))
    expect(kept.at(-1)).toBe(ids.at(-1))
    expect(records.summary().total_executions).toBe(kept.length)
    expect((await records.query({ limit: 1000 })).total).toBe(kept.length)
  })

  it("after the size limit drops records, the aggregates are those of the file as it is (a tool whose records all went is gone from them)", async () => {
    const dir = freshDir()
    const records = await open(dir, { maxFileSizeMb: 0.02 })
    // The oldest records are of a tool and service of their own, some failed: the first trims take all of them.
    for (let i = 0; i < 20; i++) {
      await records.append(rec({ tool_name: "old", service_name: "gone", outcome: i % 3 === 0 ? "tool_error" : "success", duration_ms: 7 + i, result: "x".repeat(300) }))
    }
    for (let i = 0; i < 150; i++) {
      await records.append(rec({ tool_name: i % 2 === 0 ? "a" : "b", outcome: i % 5 === 0 ? "timeout" : "success", duration_ms: i, result: "x".repeat(300) }))
    }
    expect(parsedLines(dir).some((r) => (r as { tool_name?: string }).tool_name === "old")).toBe(false)
    const summary = records.summary()
    expect(Object.keys(summary.by_tool).sort()).toEqual(["svc__a", "svc__b"])
    expect(Object.keys(summary.by_service)).toEqual(["svc"])
    const daily = records.daily(3)
    await close(records)
    // Counted afresh from the file, as a restart does.
    const again = await open(dir, { maxFileSizeMb: 0.02 })
    expect(again.summary()).toEqual(summary)
    expect(again.daily(3)).toEqual(daily)
    expect(summary.total_executions).toBe(parsedLines(dir).length)
  })

  it("a file over the limit at open is cut to under 80 %; -1 is unlimited", async () => {
    const dir = freshDir()
    const body = Array.from({ length: 200 }, (_, i) => line({ id: `r${i}`, result: "y".repeat(500) })).join("\n") + "\n"
    writeFileSync(fileOf(dir), body)
    const size = Buffer.byteLength(body)
    const unlimited = await open(dir, { maxFileSizeMb: -1 })
    for (let i = 0; i < 50; i++) await unlimited.append(rec({ result: "z".repeat(500) }))
    expect(unlimited.summary().total_executions).toBe(250)
    await close(unlimited)
    expect(lines(dir)).toHaveLength(250)

    const limitMb = (size / 2) / (1024 * 1024)
    const limited = await open(dir, { maxFileSizeMb: limitMb })
    expect(statSync(fileOf(dir)).size).toBeLessThanOrEqual(limitMb * 1024 * 1024 * 0.8)
    const kept = parsedLines(dir)
    expect(kept.at(-1)!.id).not.toMatch(/^r/) // the newest (appended) ones stay
    expect(limited.summary().total_executions).toBe(kept.length)
  })

  it("cuts a result over 64 KiB and marks it result_truncated", async () => {
    const dir = freshDir()
    const records = await open(dir)
    const small = await records.append(rec({ result: { text: "x".repeat(60_000) } }))
    expect(small.result_truncated).toBeUndefined()
    expect(small.result).toEqual({ text: "x".repeat(60_000) })

    const original = { text: "x".repeat(70_000) }
    const big = await records.append(rec({ result: original }))
    expect(big.result_truncated).toBe(true)
    // The cut result is the start of the result's JSON text, 64 KiB long.
    expect(typeof big.result).toBe("string")
    expect(JSON.stringify(original).startsWith(big.result as string)).toBe(true)
    expect(Buffer.byteLength(big.result as string)).toBeLessThanOrEqual(64 * 1024)
    expect(Buffer.byteLength(big.result as string)).toBeGreaterThan(60 * 1024)
    const stored = JSON.parse(lines(dir).at(-1)!) as { result_truncated?: boolean; result: unknown }
    expect(stored.result_truncated).toBe(true)
    expect(stored.result).toEqual(big.result)
  })

  it("cuts parameters and result at maxValueBytes (--tool-record-max-value-bytes), each marked", async () => {
    const dir = freshDir()
    const records = await open(dir, { maxValueBytes: 1000 })
    const within = await records.append(rec({ params: { a: "p".repeat(900) }, result: { b: "r".repeat(900) } }))
    expect(within.params_truncated).toBeUndefined()
    expect(within.result_truncated).toBeUndefined()
    const params = { a: "p".repeat(5000) }
    const over = await records.append(rec({ params, result: { b: "r".repeat(900) } }))
    expect(over.params_truncated).toBe(true)
    expect(over.result_truncated).toBeUndefined()
    expect(JSON.stringify(params).startsWith(over.params as string)).toBe(true)
    expect(Buffer.byteLength(over.params as string)).toBeLessThanOrEqual(1000)
    expect(over.result).toEqual({ b: "r".repeat(900) })
    const both = await records.append(rec({ params, result: { b: "r".repeat(5000) } }))
    expect([both.params_truncated, both.result_truncated]).toEqual([true, true])
    const stored = JSON.parse(lines(dir).at(-1)!) as { params_truncated?: boolean; result_truncated?: boolean }
    expect([stored.params_truncated, stored.result_truncated]).toEqual([true, true])
    expect(lines(dir).at(-1)!.length).toBeLessThan(3000)
  })

  it("measures the 64 KiB in bytes: a multi-byte result over 64 KiB is cut too", async () => {
    const dir = freshDir()
    const records = await open(dir)
    // 40,000 characters, 80,000 bytes of UTF-8.
    const r = await records.append(rec({ result: "é".repeat(40_000) }))
    expect(r.result_truncated).toBe(true)
    expect(Buffer.byteLength(r.result as string)).toBeLessThanOrEqual(64 * 1024)
  })

  it("concurrent appends all land: one line each, unique ids, aggregates agree", async () => {
    const dir = freshDir()
    const records = await open(dir)
    const appended = await Promise.all(Array.from({ length: 500 }, (_, i) => records.append(rec({ tool_name: `t${i % 5}` }))))
    const fileIds = parsedLines(dir).map((r) => r.id)
    expect(fileIds).toHaveLength(500)
    expect(new Set(fileIds).size).toBe(500)
    expect(new Set(fileIds)).toEqual(new Set(appended.map((r) => r.id)))
    expect(records.summary().total_executions).toBe(500)
    expect((await records.query({ limit: 1000 })).total).toBe(500)
  })

  /** Appends `n` records a turn of the event loop apart, while `during` runs; resolves when all are written. */
  const appendDuring = async (records: ToolRecords, during: Promise<unknown>, n: number) => {
    const pending: Array<Promise<unknown>> = [during]
    for (let i = 0; i < n; i++) {
      pending.push(records.append(rec({ trace_id: `during-${i}` })))
      await flush()
    }
    await Promise.all(pending)
  }

  it("appends made while the size limit rewrites the file are counted by the aggregates", async () => {
    const dir = freshDir()
    const limit = 0.05 * 1024 * 1024
    const records = await open(dir, { maxFileSizeMb: 0.05 })
    // Fill to just under the limit, then one large record pushes it over: the limit is enforced
    // (the whole file read, then rewritten) while more appends arrive.
    while (statSync(fileOf(dir)).size < limit - 2_000) await records.append(rec({ result: "w".repeat(300) }))
    await appendDuring(records, records.append(rec({ result: "w".repeat(4_000) })), 30)
    const kept = parsedLines(dir)
    expect(kept.filter((r) => (r as { trace_id?: string }).trace_id?.startsWith("during-"))).toHaveLength(30)
    expect(records.summary().total_executions).toBe(kept.length)
    expect((await records.query({ limit: 1000 })).total).toBe(kept.length)
  })

  it("appends made while cleanup() rewrites the file are counted by the aggregates", async () => {
    const dir = freshDir()
    const records = await open(dir, { retentionDays: 7 })
    for (let i = 0; i < 400; i++) await records.append(rec({ timestamp: new Date(Date.now() - (i % 2) * 9 * DAY).toISOString() }))
    await appendDuring(records, records.cleanup(), 30)
    const kept = parsedLines(dir)
    expect(kept).toHaveLength(230)
    expect(records.summary().total_executions).toBe(kept.length)
    expect((await records.query({ limit: 1000 })).total).toBe(kept.length)
  })

  it("leaves no temporary file behind after rewrites", async () => {
    const dir = freshDir()
    writeFileSync(fileOf(dir), `${line({ timestamp: new Date(Date.now() - 30 * DAY).toISOString() })}\n${line()}\n`)
    const records = await open(dir, { retentionDays: 7, maxFileSizeMb: 0.01 })
    for (let i = 0; i < 60; i++) await records.append(rec({ result: "q".repeat(300), timestamp: new Date(Date.now() - (i % 2) * 9 * DAY).toISOString() }))
    await records.cleanup()
    await close(records)
    expect(readdirSync(dir)).toEqual([RECORDS_FILE])
  })

  it("creates the file 0600; narrows a wider mode to 0600 and keeps a stricter one, also across rewrites", async () => {
    const dir = freshDir()
    const records = await open(dir)
    await records.append(rec())
    expect(statSync(fileOf(dir)).mode & 0o777).toBe(0o600)
    await close(records)

    const wide = freshDir()
    writeFileSync(fileOf(wide), `${line()}\n`)
    chmodSync(fileOf(wide), 0o644)
    await open(wide)
    expect(statSync(fileOf(wide)).mode & 0o777).toBe(0o600)

    const strict = freshDir()
    writeFileSync(fileOf(strict), `${line({ timestamp: new Date(Date.now() - 30 * DAY).toISOString() })}\n${line()}\n`)
    chmodSync(fileOf(strict), 0o400)
    const rewritten = await open(strict, { retentionDays: 7 }) // the old line is dropped: the file is rewritten
    expect(lines(strict)).toHaveLength(1)
    expect(statSync(fileOf(strict)).mode & 0o777).toBe(0o400)
    await close(rewritten)
  })

  it("a symlink planted at the records path is refused, never followed: the victim stays byte-for-byte the same", async () => {
    const dir = freshDir()
    const victim = join(freshDir(), "victim.jsonl")
    // The victim even looks like a records file with an expired record, which retention would rewrite.
    const content = `${line({ timestamp: new Date(Date.now() - 30 * DAY).toISOString() })}\nnot a record\n`
    writeFileSync(victim, content)
    chmodSync(victim, 0o644)
    symlinkSync(victim, fileOf(dir))
    const captured = captureLogs({ level: "error" })
    const logged = captured.lines
    try {
      const records = await open(dir, { retentionDays: 7, maxFileSizeMb: 0.001 })
      expect(logged.some((m) => m.includes(fileOf(dir)) && m.includes("symbolic link"))).toBe(true)
      // Records are kept in memory: queries and summaries still work.
      for (let i = 0; i < 20; i++) await records.append(rec({ result: "z".repeat(200) }))
      expect((await records.query({ limit: 5 })).total).toBe(20)
      expect(records.summary().total_executions).toBe(20)
      expect(await records.cleanup()).toBe(0)
      await close(records)
    } finally {
      captured.restore()
    }
    expect(readFileSync(victim, "utf8")).toBe(content)
    expect(statSync(victim).mode & 0o777).toBe(0o644)
    expect(lstatSync(fileOf(dir)).isSymbolicLink()).toBe(true)
    expect(readdirSync(dir)).toEqual([RECORDS_FILE])
  })
})
