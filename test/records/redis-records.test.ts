// Tool-call records on both backends, the same assertions: the records file (ToolRecords) and the
// cluster's Redis stream (RedisRecords) against a real redis-server. Then what only the stream has:
// two replicas see each other's records (queries, summaries, onRecord), a hostile flood stays within
// the caps with counts equal to what the stream holds, a huge value is cut, retention drops by age.
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { clusterKey } from "../../src/redis/key-names.js"
import type { Redis } from "../../src/redis/connection.js"
import { READ_BACK_LIMIT, RedisRecords, TYPICAL_RECORD_BYTES } from "../../src/records/redis-records.js"
import { ToolRecords, type RecordsBackend, type RecordsOptions, type ToolRecord } from "../../src/records/tool-records.js"
import { hasRedisServer, newRecord as rec, startRedisServer, type RedisServer } from "../support/index.js"

const DAY = 86_400_000
let redis: RedisServer
const opened: RecordsBackend[] = []
const dirs: string[] = []
let clusterSeq = 0

const connect = (): Promise<Redis> => redis.connect()

/** The two backends, each opened fresh (a new folder, a new cluster name). */
const backends: Array<[string, (options?: Partial<RecordsOptions>) => Promise<RecordsBackend>]> = [
  [
    "the records file",
    async (options = {}) => {
      const dir = mkdtempSync(join(tmpdir(), "mcp-store-records-"))
      dirs.push(dir)
      const r = await ToolRecords.open(join(dir, "mcp.json"), { maxFileSizeMb: -1, retentionDays: -1, ...options })
      opened.push(r)
      return r
    }
  ],
  [
    "the Redis stream",
    async (options = {}) => {
      const r = await RedisRecords.open({ client: await connect(), cluster: `records-${clusterSeq++}` }, { maxFileSizeMb: -1, retentionDays: -1, ...options })
      opened.push(r)
      return r
    }
  ]
]

beforeAll(async () => {
  if (hasRedisServer) redis = await startRedisServer()
})
afterEach(async () => {
  await Promise.all(opened.splice(0).map((r) => r.close()))
  redis?.disconnectAll()
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true })
})
afterAll(() => redis?.stop())

describe.skipIf(!hasRedisServer).each(backends)("%s", (_name, open) => {
  it("answers queries, summaries and daily figures alike", async () => {
    const records = await open()
    await records.append(rec({ service_name: "a", tool_name: "x", duration_ms: 10 }))
    await records.append(rec({ service_name: "a", tool_name: "y", outcome: "tool_error", error: "no", duration_ms: 30 }))
    await records.append(rec({ scope: "agent", agent_id: "bob", service_name: "b", tool_name: "x", duration_ms: 20 }))
    await records.append(rec({ service_name: "a", tool_name: "x", outcome: "cancelled", duration_ms: 5 }))

    const all = await records.query({})
    expect(all.total).toBe(4)
    expect(all.executions.map((r) => r.tool_name)).toEqual(["x", "x", "y", "x"])
    const page = await records.query({ scope: "store", service_name: "a", limit: 1, offset: 1 })
    expect(page).toMatchObject({ total: 3, executions: [{ tool_name: "y", outcome: "tool_error" }] })
    expect((await records.query({ outcome: "tool_error" })).total).toBe(1)
    expect((await records.query({ scope: "bob" })).executions.map((r) => r.agent_id)).toEqual(["bob"])
    expect((await records.query({ since: Date.now() + 60_000 })).total).toBe(0)

    expect(records.summary()).toEqual({
      total_executions: 4,
      succeeded: 3,
      failed: 1,
      avg_duration_ms: 16.25,
      by_tool: expect.objectContaining({ a__x: { count: 2, errors: 0, avg_duration_ms: 7.5 }, a__y: { count: 1, errors: 1, avg_duration_ms: 30 } }),
      by_service: expect.objectContaining({ a: { count: 3, errors: 1, avg_duration_ms: 15 }, b: { count: 1, errors: 0, avg_duration_ms: 20 } })
    })
    expect(records.summary(["bob"]).total_executions).toBe(1)
    const today = records.daily(2)
    expect(today).toHaveLength(2)
    expect(today[1]).toMatchObject({ calls: 4, errors: 1 })
    expect(today[0]).toMatchObject({ calls: 0 })
    expect(records.daily(1, Date.now(), { agent_id: "store", service_name: "a" })[0]).toMatchObject({ calls: 3, errors: 1 })
    expect(records.inMemory()).toHaveLength(4)
  })

  it("a call's record is in the next query and summary once the call is answered (its `written` settled)", async () => {
    const records = await open()
    for (let i = 1; i <= 20; i++) {
      const { record, written } = records.record(rec({ service_name: "rw", tool_name: `t${i}` }))
      await written
      const newest = await records.query({ service_name: "rw", limit: 1 })
      expect(newest.total).toBe(i)
      expect(newest.executions[0]).toEqual(record)
      expect(records.summary().total_executions).toBe(i)
    }
  })

  it("pages past the in-memory window with the same totals", async () => {
    const records = await open({ memoryLimit: 3 })
    for (let i = 0; i < 12; i++) await records.append(rec({ tool_name: i % 3 === 0 ? "rare" : "common", params: { i } }))
    const page = await records.query({ limit: 2, offset: 8 })
    expect(page.total).toBe(12)
    expect(page.executions.map((r) => (r.params as { i: number }).i)).toEqual([3, 2])
    const rare = await records.query({ tool_name: "rare", limit: 10 })
    expect(rare.total).toBe(4)
    expect(rare.executions.map((r) => (r.params as { i: number }).i)).toEqual([9, 6, 3, 0])
    const errors = await records.query({ outcome: "success", limit: 1, offset: 11 })
    expect(errors.total).toBe(12)
    expect((errors.executions[0]?.params as { i: number }).i).toBe(0)
  })

  it("cuts parameters and results over the value limit, and says so", async () => {
    const records = await open({ maxValueBytes: 1024 })
    const r = await records.append(rec({ params: { text: "é".repeat(4000) }, result: "r".repeat(5000) }))
    expect(r.params_truncated).toBe(true)
    expect(r.result_truncated).toBe(true)
    const [stored] = (await records.query({})).executions
    expect(Buffer.byteLength(stored!.params as string)).toBeLessThanOrEqual(1024)
    expect((stored!.result as string).length).toBe(1024)
  })

  it("drops records older than the retention on cleanup, with their counts", async () => {
    const records = await open({ retentionDays: 1 })
    await records.append(rec({ tool_name: "old", timestamp: new Date(Date.now() - 3 * DAY).toISOString() }))
    expect(await records.cleanup()).toBe(1)
    await records.append(rec({ tool_name: "new" }))
    expect((await records.query({})).executions.map((r) => r.tool_name)).toEqual(["new"])
    expect(records.summary().total_executions).toBe(1)
  })

  it("gives every new record to onRecord listeners until they unsubscribe", async () => {
    const records = await open()
    const seen: ToolRecord[] = []
    const off = records.onRecord((r) => seen.push(r))
    await records.append(rec({ tool_name: "one" }))
    off()
    await records.append(rec({ tool_name: "two" }))
    expect(seen.map((r) => r.tool_name)).toEqual(["one"])
  })
})

describe.skipIf(!hasRedisServer)("the Redis stream of a cluster", () => {
  it("is one set of records for every replica: queries, summaries and onRecord cover the cluster", async () => {
    const data = { cluster: "shared" }
    const a = await RedisRecords.open({ ...data, client: await connect() }, { maxFileSizeMb: -1, retentionDays: -1 })
    opened.push(a)
    const b = await RedisRecords.open({ ...data, client: await connect() }, { maxFileSizeMb: -1, retentionDays: -1 })
    opened.push(b)
    const seenByA = new Promise<ToolRecord>((resolve) => a.onRecord((r) => r.service_name === "from-b" && resolve(r)))
    const ownOfA: string[] = []
    a.onOwnRecord((r) => ownOfA.push(r.service_name))
    await a.append(rec({ service_name: "from-a" }))
    const fromB = await b.append(rec({ service_name: "from-b" }))
    expect((await seenByA).id).toBe(fromB.id)
    expect(ownOfA).toEqual(["from-a"])
    for (const replica of [a, b]) {
      // b's reader passed a's record before b's own: both are counted on b; a waited for b's above.
      expect(replica.summary().total_executions).toBe(2)
      expect((await replica.query({})).executions.map((r) => r.service_name)).toEqual(["from-b", "from-a"])
    }
    // A replica that starts later reads what is there.
    const c = await RedisRecords.open({ ...data, client: await connect() }, { maxFileSizeMb: -1, retentionDays: -1 })
    opened.push(c)
    expect(c.summary().by_service).toMatchObject({ "from-a": { count: 1 }, "from-b": { count: 1 } })
    expect(c.inMemory()).toHaveLength(2)
  })

  it("keeps a hostile flood within its caps, counts equal to what the stream holds, on every replica", async () => {
    const client = await connect()
    // 0.05 MB: 52428 bytes, 102 entries.
    const options = { maxFileSizeMb: 0.05, retentionDays: -1 }
    const maxLen = Math.floor((0.05 * 1024 * 1024) / TYPICAL_RECORD_BYTES)
    const a = await RedisRecords.open({ client, cluster: "flood" }, options)
    opened.push(a)
    const b = await RedisRecords.open({ client: await connect(), cluster: "flood" }, options)
    opened.push(b)
    await Promise.all(Array.from({ length: 300 }, (_, i) => (i % 2 === 0 ? a : b).append(rec({ tool_name: `t${i % 7}`, params: { i } }))))
    const stream = clusterKey("flood", "records")
    const length = await client.xLen(stream)
    expect(length).toBeLessThanOrEqual(maxLen)
    expect(length).toBeGreaterThan(0)
    // Big records: the byte cap holds before the entry cap.
    await Promise.all(Array.from({ length: 40 }, () => a.append(rec({ result: "z".repeat(8_000) }))))
    const counts = await client.hGetAll(clusterKey("flood", "records", "counts"))
    expect(Number(counts["B"])).toBeLessThanOrEqual(0.05 * 1024 * 1024)
    const held = await client.xLen(stream)
    expect(Number(counts["N"])).toBe(held)
    // Each replica's aggregates come back to the hash (rebuilt after other replicas' trims).
    await a.cleanup()
    for (const replica of [a, b]) {
      await expect.poll(() => replica.summary().total_executions, { timeout: 5_000 }).toBe(held)
      expect((await replica.query({ limit: 1000 })).total).toBe(held)
    }
  })

  it("holds at most READ_BACK_LIMIT written batches for a reader that stalls while writes go on", async () => {
    const records = await RedisRecords.open({ client: await connect(), cluster: `stall-${clusterSeq++}` }, { maxFileSizeMb: -1, retentionDays: -1 })
    opened.push(records)
    // The reader stops (as one whose connection hangs would); the writer goes on, a batch a record.
    await (records as unknown as { follower: { close(): Promise<void> } }).follower.close()
    const client = await connect()
    const stream = clusterKey(`stall-${clusterSeq - 1}`, "records")
    for (let i = 0; i < READ_BACK_LIMIT + 50; i++) {
      void records.record(rec({ tool_name: `t${i}` })).written
      while ((await client.xLen(stream)) <= i) await new Promise((resolve) => setImmediate(resolve))
    }
    expect(await client.xLen(stream)).toBe(READ_BACK_LIMIT + 50)
    expect(records.readBacksWaiting).toBe(READ_BACK_LIMIT)
  })

  it("stops its reader and leaves no connection on close", async () => {
    const client = await connect()
    const before = (await client.clientList()).length
    const r = await RedisRecords.open({ client, cluster: "close" }, { maxFileSizeMb: -1, retentionDays: -1 })
    expect((await client.clientList()).length).toBe(before + 1)
    await r.close()
    await expect.poll(async () => (await client.clientList()).length, { timeout: 5_000 }).toBe(before)
    await expect(r.record(rec()).written).rejects.toThrow(/closed/)
  })
})
