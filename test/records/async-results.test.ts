/**
 * The backends of asynchronous calls' state, on their own: the file beside the services file
 * (`AsyncResultsFile`: bounds by count, bytes and age, the oldest ended dropped first; calls left
 * running by a previous run found interrupted, once; a file that is not JSON forgotten, not fatal;
 * a symlink at its path never followed)
 * and the cluster's Redis (`RedisAsyncResults`: bounds by count and bytes with the dropped calls' keys; a
 * running call of a replica that is gone read as interrupted, taken to be recorded once).
 */
import { lstatSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { AsyncResultsFile, asyncResultsFileFor, type AsyncCallEntry, type AsyncResultsOptions } from "../../src/records/async-results.js"
import { RedisAsyncResults } from "../../src/records/redis-async-results.js"
import { clusterKey } from "../../src/redis/key-names.js"
import { hasRedisServer, startRedisServer, type RedisServer } from "../support/index.js"

const entry = (n: number, over: Partial<AsyncCallEntry> = {}): AsyncCallEntry => ({
  call_id: `call_${String(n).padStart(32, "0")}`,
  scope: "store",
  owner: "owner-digest",
  tool_name: "fx__add",
  service_name: "fx",
  original_name: "add",
  status: "completed",
  progress: null,
  started_at: new Date().toISOString(),
  ended_at: new Date().toISOString(),
  answer: { http_status: 200, body: { success: true, result: String(n) } },
  error: null,
  trace_id: null,
  ...over
})

const LOOSE: AsyncResultsOptions = { maxFinished: 1000, retentionSeconds: 86_400, maxBytes: 64 * 1024 * 1024 }

describe("AsyncResultsFile", () => {
  const dirs: string[] = []
  const servicesFile = () => {
    const dir = mkdtempSync(join(tmpdir(), "mcp-store-async-"))
    dirs.push(dir)
    return join(dir, "mcp.json")
  }
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true })
  })

  it("keeps at most maxFinished, the oldest ended dropped first; the file (0600) holds what is kept", async () => {
    const file = servicesFile()
    const results = await AsyncResultsFile.open(file, { ...LOOSE, maxFinished: 3 })
    for (const n of [1, 2, 3, 4, 5]) await results.finish(entry(n))
    expect(await results.get(entry(1).call_id)).toBeUndefined()
    expect(await results.get(entry(2).call_id)).toBeUndefined()
    for (const n of [3, 4, 5]) expect((await results.get(entry(n).call_id))?.answer?.body).toEqual({ success: true, result: String(n) })
    await results.close()
    const path = asyncResultsFileFor(file)
    expect(path).toBe(file.replace(/mcp\.json$/, "mcp.async-calls.json"))
    expect(statSync(path).mode & 0o777).toBe(0o600)
    const kept = (JSON.parse(readFileSync(path, "utf8")) as { calls: AsyncCallEntry[] }).calls.map((c) => c.call_id)
    expect(kept).toEqual([3, 4, 5].map((n) => entry(n).call_id))
  })

  it("keeps the answers within maxBytes together, and drops a call ended longer ago than the retention", async () => {
    const results = await AsyncResultsFile.open(servicesFile(), { ...LOOSE, maxBytes: 200 })
    const big = (n: number) => entry(n, { answer: { http_status: 200, body: { text: "x".repeat(80) } } })
    for (const n of [1, 2, 3]) await results.finish(big(n))
    expect(await results.get(big(1).call_id)).toBeUndefined()
    expect(await results.get(big(3).call_id)).toBeDefined()
    await results.close()

    const aged = await AsyncResultsFile.open(servicesFile(), { ...LOOSE, retentionSeconds: 3600 })
    const old = entry(7, { ended_at: new Date(Date.now() - 2 * 3_600_000).toISOString() })
    await aged.finish(old)
    await aged.finish(entry(8))
    expect(await aged.get(old.call_id)).toBeUndefined()
    expect(await aged.get(entry(8).call_id)).toBeDefined()
    await aged.close()
  })

  it("at open, the calls a previous run left running are interrupted, kept, and taken to be recorded: on the file as found until their record is written", async () => {
    const file = servicesFile()
    const first = await AsyncResultsFile.open(file, LOOSE)
    await first.start(entry(1, { status: "running", ended_at: null, answer: null, params: { ms: 5 } }))
    await first.finish(entry(2))
    await first.close()

    const second = await AsyncResultsFile.open(file, LOOSE)
    const taken = await second.takeInterrupted()
    expect(taken).toHaveLength(1)
    expect(taken[0]).toMatchObject({ call_id: entry(1).call_id, status: "interrupted", params: { ms: 5 } })
    expect(await second.takeInterrupted()).toHaveLength(0)
    const kept = await second.get(entry(1).call_id)
    expect(kept).toMatchObject({ status: "interrupted", answer: null })
    expect(kept).not.toHaveProperty("params")
    expect((await second.get(entry(2).call_id))?.status).toBe("completed")
    // Another change is written, the interrupted call still as it was found: its record is not written yet.
    await second.finish(entry(3))
    await second.close()

    // Stopped (or killed) before its record was written: the next start finds it running again.
    const again = await AsyncResultsFile.open(file, LOOSE)
    expect((await again.takeInterrupted()).map((e) => e.call_id)).toEqual([entry(1).call_id])
    expect((await again.get(entry(3).call_id))?.status).toBe("completed")
    again.settled(entry(1).call_id)
    await again.close()

    // Its record written (settled): nothing left to record.
    const third = await AsyncResultsFile.open(file, LOOSE)
    expect(await third.takeInterrupted()).toHaveLength(0)
    expect(await third.get(entry(1).call_id)).toMatchObject({ status: "interrupted" })
    await third.close()
  })

  it("a file that is not JSON is forgotten (a warning), not a failed start; entries of a wrong shape are left out", async () => {
    const file = servicesFile()
    writeFileSync(asyncResultsFileFor(file), "{not json")
    const results = await AsyncResultsFile.open(file, LOOSE)
    expect(results.finishedCount()).toBe(0)
    await results.close()
    writeFileSync(asyncResultsFileFor(file), JSON.stringify({ version: 1, calls: [{ call_id: 1 }, entry(4), { ...entry(5), status: "strange" }] }))
    const again = await AsyncResultsFile.open(file, LOOSE)
    expect(again.finishedCount()).toBe(1)
    expect(await again.get(entry(4).call_id)).toBeDefined()
    await again.close()
  })

  it("a symlink at the file's path is neither read nor written through: the calls are kept in memory only", async () => {
    const file = servicesFile()
    const other = join(file, "..", "other.json")
    const otherText = JSON.stringify({ version: 1, calls: [entry(7)] })
    writeFileSync(other, otherText)
    symlinkSync(other, asyncResultsFileFor(file))
    const results = await AsyncResultsFile.open(file, LOOSE)
    expect(results.finishedCount()).toBe(0)
    await results.finish(entry(8))
    expect((await results.get(entry(8).call_id))?.answer?.body).toEqual({ success: true, result: "8" })
    await results.close()
    expect(lstatSync(asyncResultsFileFor(file)).isSymbolicLink()).toBe(true)
    expect(readFileSync(other, "utf8")).toBe(otherText)
  })
})

describe.skipIf(!hasRedisServer)("RedisAsyncResults", () => {
  let redis: RedisServer
  beforeAll(async () => {
    redis = await startRedisServer()
  }, 30_000)
  afterAll(async () => {
    redis.disconnectAll()
    await redis?.stop()
  })

  it("keeps at most maxFinished, the dropped calls' keys deleted; a finished call expires with the retention", async () => {
    const client = await redis.connect()
    const results = new RedisAsyncResults({ client, cluster: "bounds" }, { ...LOOSE, maxFinished: 2, retentionSeconds: 60 }, { alive: async () => true })
    for (const n of [1, 2, 3]) {
      await results.start(entry(n, { status: "running", ended_at: null, answer: null }))
      await results.finish(entry(n, { ended_at: new Date(Date.now() + n).toISOString() }))
    }
    expect(await results.get(entry(1).call_id)).toBeUndefined()
    expect(await client.exists(`${clusterKey("bounds", "async")}:${entry(1).call_id}`)).toBe(0)
    expect((await results.get(entry(3).call_id))?.answer?.body).toEqual({ success: true, result: "3" })
    const ttl = await client.pTTL(`${clusterKey("bounds", "async")}:${entry(3).call_id}`)
    expect(ttl).toBeGreaterThan(0)
    expect(ttl).toBeLessThanOrEqual(60_000)
  })

  it("keeps the answers within maxBytes together, as the file does: the oldest dropped with its key and its size", async () => {
    const client = await redis.connect()
    const size = Buffer.byteLength(JSON.stringify(entry(1).answer!.body))
    const results = new RedisAsyncResults({ client, cluster: "bytes" }, { ...LOOSE, maxBytes: 2 * size + 1 }, { alive: async () => true })
    for (const n of [1, 2, 3]) await results.finish(entry(n, { ended_at: new Date(Date.now() + n).toISOString() }))
    expect(await results.get(entry(1).call_id)).toBeUndefined()
    expect(await client.exists(`${clusterKey("bytes", "async")}:${entry(1).call_id}`)).toBe(0)
    for (const n of [2, 3]) expect((await results.get(entry(n).call_id))?.answer?.body).toEqual({ success: true, result: String(n) })
    expect(await client.hLen(clusterKey("bytes", "async-sizes"))).toBe(2)
  })

  it("a running call of a replica that is gone reads interrupted, on every reader, and is taken to be recorded by one", async () => {
    const client = await redis.connect()
    const running = entry(9, { status: "running", ended_at: null, answer: null, replica: "gone-replica", params: { ms: 1 } })
    const writer = new RedisAsyncResults({ client, cluster: "gone" }, LOOSE, { alive: async () => true })
    await writer.start(running)
    // The writer still runs it: read by another replica that sees it alive, it is running.
    const alive = new RedisAsyncResults({ client, cluster: "gone" }, LOOSE, { alive: async () => true })
    expect((await alive.get(running.call_id))?.status).toBe("running")
    const readers = [0, 1].map(() => new RedisAsyncResults({ client, cluster: "gone" }, LOOSE, { alive: async (id) => id !== "gone-replica" }))
    const read = await Promise.all(readers.map((r) => r.get(running.call_id)))
    for (const e of read) expect(e?.status).toBe("interrupted")
    const taken = (await Promise.all(readers.map((r) => r.takeInterrupted()))).flat()
    expect(taken).toHaveLength(1)
    expect(taken[0]).toMatchObject({ call_id: running.call_id, params: { ms: 1 } })
    expect((await readers[0]!.get(running.call_id))?.status).toBe("interrupted")
    expect(await readers[0]!.takeInterrupted()).toHaveLength(0)
  })
})
