/**
 * Asynchronous calls in replica mode (src/records/redis-async-results.ts, src/runtime/async-calls.ts):
 * two real store processes on one real Redis. A call taken by the replica that does not run its
 * service is started on the one that does; it is read through either, and cancelled through the one
 * that took it (the one that runs it is asked); when the replica running it is killed (SIGKILL), the
 * other reads it `interrupted` once that replica has left the registry, and records it once. With
 * Redis frozen, a new call is refused and not started, and a call's end is answered from the
 * replica that ran it until Redis keeps it.
 */
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { clusterKey } from "../../src/redis/key-names.js"
import {
  eventually,
  fixtureService,
  freshDir,
  hasRedisServer,
  spawnStore,
  startRedisServer,
  useReplicaSecret,
  type Reply,
  type RedisServer,
  type StoreProcess
} from "../support/index.js"

const LEASE_MS = 2000

describe.skipIf(!hasRedisServer)("asynchronous calls across replicas", { timeout: 120_000 }, () => {
  let redis: RedisServer
  const replicas: StoreProcess[] = []
  let restoreSecret: (() => void) | undefined

  beforeAll(async () => {
    restoreSecret = useReplicaSecret()
    redis = await startRedisServer()
    for (const i of [0, 1]) {
      const dir = freshDir()
      writeFileSync(join(dir, "mcp.json"), JSON.stringify({ mcpServers: {} }))
      replicas[i] = await spawnStore({
        configFile: join(dir, "mcp.json"),
        extraArgs: ["--redis-url", redis.url, "--cluster-name", "async", "--lease-ms", String(LEASE_MS)],
        startTimeoutMs: 100_000
      })
    }
  }, 150_000)
  afterAll(async () => {
    await Promise.all(replicas.map((r) => r?.kill()))
    await redis?.stop()
    restoreSecret?.()
  }, 30_000)

  it("Redis frozen: a new call is refused 503 and not started; a call that ends meanwhile is read and cancelled from the replica that ran it, and kept once Redis answers", async () => {
    const [first] = replicas as [StoreProcess, StoreProcess]
    const added = await first.post("/for_store/add_service?wait=30", fixtureService("frozen"))
    expect(added.status, added.text).toBe(200)
    for (const r of replicas) expect((await r.post("/for_store/wait_service", { client_id_or_service_name: "frozen", status: "healthy", timeout: 30 })).body.success).toBe(true)
    const client = await redis.connect()
    const holder = await client.get(clusterKey("async", "lease", "store/frozen"))
    const owner = replicas.find((r) => holder?.includes(`-${r.pid}-`) === true) as StoreProcess
    expect(owner).toBeDefined()
    // Both started while Redis answers: one ends while it is frozen, one is cancelled while it is.
    const ends = await owner.post("/for_store/call_tool", { tool_name: "frozen__sleep", args: { ms: 1_500 }, async: true })
    const cancelMe = await owner.post("/for_store/call_tool", { tool_name: "frozen__sleep", args: { ms: 120_000 }, async: true })
    expect([ends.status, cancelMe.status], ends.text + cancelMe.text).toEqual([202, 202])
    const ended: Array<[string, string]> = []
    redis.freeze()
    try {
      const started = performance.now()
      const refused = await owner.post("/for_store/call_tool", { tool_name: "frozen__echo", args: { text: "x" }, async: true })
      expect(refused.status, refused.text).toBe(503)
      expect(refused.body.error.code).toBe("SERVICE_UNAVAILABLE")
      expect(refused.body.message).toMatch(/Redis cannot be reached.*nothing was changed/)
      expect(performance.now() - started).toBeLessThan(10_000)
      // Ended while Redis does not answer: read as it ended, from the replica that ran it. (With a
      // lease this short, the replica may have stopped the service when Redis froze, ending the
      // call "failed": completed or failed, it is read as it ended, never as running.)
      let read: Reply | undefined
      expect(await eventually(async () => ((read = await owner.get(`/for_store/calls/${ends.body.call_id}`)), read.status === 200 && read.body.status !== "running"), 15_000, 100), read?.text).toBe(true)
      expect(["completed", "failed"]).toContain(read!.body.status)
      // Cancelled while Redis does not answer: the cancel is answered, with the call's end.
      const cancelled = await owner.post(`/for_store/calls/${cancelMe.body.call_id}/cancel`)
      expect(cancelled.status, cancelled.text).toBe(200)
      expect(["cancelled", "failed"]).toContain(cancelled.body.status)
      ended.push([ends.body.call_id, read!.body.status], [cancelMe.body.call_id, cancelled.body.status])
    } finally {
      redis.thaw()
    }
    // Once Redis answers again, both ends are kept there: the other replica reads them as they ended.
    const other = replicas.find((r) => r !== owner) as StoreProcess
    for (const [id, status] of ended) {
      expect(await eventually(async () => (await other.get(`/for_store/calls/${id}`)).body.status === status, 30_000, 200), `${id} ${status}`).toBe(true)
    }
    for (const r of replicas) expect((await r.post("/for_store/wait_service", { client_id_or_service_name: "frozen", status: "healthy", timeout: 30 })).body.success).toBe(true)
  })

  it("a call taken by a replica that does not run the service runs on the one that does: read and cancelled through either; SIGKILL of that one: interrupted, recorded once", async () => {
    const [first] = replicas as [StoreProcess, StoreProcess]
    const added = await first.post("/for_store/add_service?wait=30", fixtureService("fx"))
    expect(added.status, added.text).toBe(200)
    for (const r of replicas) {
      const ready = await r.post("/for_store/wait_service", { client_id_or_service_name: "fx", status: "healthy", timeout: 30 })
      expect(ready.status, ready.text).toBe(200)
    }
    const client = await redis.connect()
    const holder = await client.get(clusterKey("async", "lease", "store/fx"))
    const owner = replicas.find((r) => holder?.includes(`-${r.pid}-`) === true) as StoreProcess
    expect(owner).toBeDefined()
    const other = replicas.find((r) => r !== owner) as StoreProcess

    const done = await other.post("/for_store/call_tool", { tool_name: "fx__add", args: { a: 40, b: 2 }, async: true })
    expect(done.status, done.text).toBe(202)
    let seen: Reply | undefined
    expect(
      await eventually(async () => {
        seen = await owner.get(`/for_store/calls/${done.body.call_id}`)
        return seen.status === 200 && seen.body.status === "completed"
      }, 20_000, 50)
    ).toBe(true)
    expect(seen!.body.answer).toMatchObject({ http_status: 200, body: { result: "42" } })
    expect((await other.get(`/for_store/calls/${done.body.call_id}`)).body.status).toBe("completed")

    // Cancelled through the replica that took it: the one that runs it is asked, and the call ends there.
    const cancelMe = await other.post("/for_store/call_tool", { tool_name: "fx__sleep", args: { ms: 120_000 }, async: true })
    expect(cancelMe.status, cancelMe.text).toBe(202)
    expect(await eventually(async () => (await owner.get(`/for_store/calls/${cancelMe.body.call_id}`)).body.service_name === "fx", 10_000, 50)).toBe(true)
    const cancelled = await other.post(`/for_store/calls/${cancelMe.body.call_id}/cancel`)
    expect(cancelled.status, cancelled.text).toBe(200)
    expect(cancelled.body.status).toBe("cancelled")
    expect((await owner.get(`/for_store/calls/${cancelMe.body.call_id}`)).body.status).toBe("cancelled")

    const running = await other.post("/for_store/call_tool", { tool_name: "fx__sleep", args: { ms: 120_000 }, async: true })
    expect(running.status, running.text).toBe(202)
    const id = running.body.call_id as string
    expect(await eventually(async () => {
      const r = await other.get(`/for_store/calls/${id}`)
      return r.body.status === "running" && r.body.service_name === "fx"
    }, 20_000, 50)).toBe(true)

    // The replica that runs the service, and so the call, is killed: the call does not fail on the
    // replica that took it (it does not run there), it reads interrupted there.
    await owner.kill()
    let after: Reply | undefined
    expect(
      await eventually(async () => {
        after = await other.get(`/for_store/calls/${id}`)
        return after.status === 200 && after.body.status !== "running"
      }, 30_000, 100)
    ).toBe(true)
    expect(after!.body.status).toBe("interrupted")
    expect(after!.body.error).toContain("replica")
    const records = async () => ((await other.get("/for_store/tool_records?outcome=interrupted")).body.executions as Array<{ tool_name: string }>) ?? []
    expect(await eventually(async () => (await records()).length === 1, 10_000)).toBe(true)
    // Read again: still interrupted, still one record.
    expect((await other.get(`/for_store/calls/${id}`)).body.status).toBe("interrupted")
    expect(await records()).toHaveLength(1)
    expect((await records())[0]).toMatchObject({ tool_name: "sleep" })
  })
})
