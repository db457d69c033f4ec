/**
 * Per-user credentials in replica mode (docs/per-user-credentials.md): not supported there yet, so a
 * `per_user` definition is refused with a 400 naming the field, and nothing is added. One real
 * store process on a real Redis.
 */
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { fixtureService, freshDir, hasRedisServer, spawnStore, startRedisServer, useReplicaSecret, type RedisServer, type StoreProcess } from "../support/index.js"

describe.skipIf(!hasRedisServer)("per-user credentials in replica mode", { timeout: 60_000 }, () => {
  let redis: RedisServer
  let replica: StoreProcess
  let restoreSecret: (() => void) | undefined

  beforeAll(async () => {
    restoreSecret = useReplicaSecret()
    redis = await startRedisServer()
    const dir = freshDir()
    writeFileSync(join(dir, "mcp.json"), JSON.stringify({ mcpServers: {} }))
    replica = await spawnStore({ configFile: join(dir, "mcp.json"), extraArgs: ["--redis-url", redis.url, "--cluster-name", "per-user"], startTimeoutMs: 50_000 })
  }, 60_000)
  afterAll(async () => {
    await replica?.kill()
    await redis?.stop()
    restoreSecret?.()
  }, 30_000)

  it("a per_user definition is refused (400, the field named), and nothing is added", async () => {
    const reply = await replica.post("/for_store/add_service", { ...fixtureService("mine"), per_user: { env: ["API_TOKEN"] } })
    expect(reply.status, reply.text).toBe(400)
    expect(reply.body.error.details.fields).toEqual([{ field: "mine.per_user", problem: "per-user credentials are not supported in replica mode yet" }])
    expect((await replica.get("/for_store/list_services")).body.services).toEqual([])
  })
})
