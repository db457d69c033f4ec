/**
 * Three real store processes (`--redis-url`) on one real Redis, driven by a client that rotates over
 * them: a service added through one replica is listed, waited on and called through every other,
 * deleted through a third; a SIGKILLed replica takes nothing with it; the replicas register
 * themselves and one of them (the leader) writes the snapshot file. (One owner per service is not
 * built yet, docs/replicas.md: each replica runs its own connection to every service.)
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { createClient } from "redis"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { clusterKey } from "../../src/cluster/keys.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { eventually, fixtureService, freshDir, hasRedisServer, spawnStore, startRedisServer, type RedisServer, type StoreProcess } from "../support/index.js"

describe.skipIf(!hasRedisServer)("three replicas on one Redis", { timeout: 60_000 }, () => {
  let redis: RedisServer
  let upstream: HttpFixture
  const replicas: StoreProcess[] = []
  const dirs: string[] = []

  beforeAll(async () => {
    ;[redis, upstream] = await Promise.all([startRedisServer(), startHttpFixture()])
    const started = await Promise.all(
      [0, 1, 2].map((i) => {
        const dir = freshDir()
        dirs.push(dir)
        const configFile = join(dir, "mcp.json")
        writeFileSync(configFile, JSON.stringify({ mcpServers: {} }))
        return spawnStore({ configFile, monitoring: { health_check_seconds: 0.5 }, extraArgs: ["--redis-url", redis.url, "--cluster-name", "three", "--lease-ms", "3000"], startTimeoutMs: 100_000 })
          .then((r) => [i, r] as const)
      })
    )
    for (const [i, r] of started) replicas[i] = r
  }, 120_000)
  afterAll(async () => {
    await Promise.all(replicas.map((r) => r?.kill()))
    await Promise.all([redis?.stop(), upstream?.stop()])
  })

  const names = async (r: StoreProcess): Promise<string[]> =>
    ((await r.get("/for_store/list_services")).body.services as Array<{ name: string }>).map((s) => s.name).sort()

  it("adds through one, waits, lists and calls through every other, deletes through a third", async () => {
    const [r0, r1, r2] = replicas as [StoreProcess, StoreProcess, StoreProcess]
    expect((await r0.post("/for_store/add_service?wait=15", { name: "remote", url: upstream.url })).body.connected).toEqual(["remote"])
    expect((await r1.post("/for_store/add_service?wait=15", fixtureService("local"))).body.connected).toEqual(["local"])
    // A wait on the third replica ends once the service is healthy there.
    for (const name of ["remote", "local"]) {
      const waited = await r2.post("/for_store/wait_service", { client_id_or_service_name: name, status: "healthy", timeout: 15 })
      expect(waited.body.data?.result ?? waited.body.result).toBe(true)
    }
    for (const r of replicas) {
      expect(await names(r)).toEqual(["local", "remote"])
      for (const tool of ["remote__echo", "local__echo"]) {
        const called = await r.post("/for_store/call_tool", { tool_name: tool, args: { text: `via ${r.port}` } })
        expect(called.status, called.text).toBe(200)
        expect(called.body.result).toBe(`via ${r.port}`)
      }
    }
    expect((await r2.del("/for_store/delete_service/remote")).status).toBe(200)
    expect(await eventually(async () => (await names(r0)).join() === "local" && (await names(r1)).join() === "local", 5000, 20)).toBe(true)
  })

  it("registers every replica, keeps a snapshot by the leader, and loses nothing when one is SIGKILLed", async () => {
    const client = createClient({ url: redis.url })
    client.on("error", () => undefined)
    await client.connect()
    try {
      const registered = async () => (await client.keys(clusterKey("three", "replica", "*"))).length
      expect(await registered()).toBe(3)
      const leader = await client.get(clusterKey("three", "lease", "leader"))
      // The snapshot is written by the leader (the replica whose pid its id carries), beside its own services file.
      const index = replicas.findIndex((r) => leader?.includes(`-${r.pid}-`) === true)
      expect(index).toBeGreaterThanOrEqual(0)
      const snapshot = join(dirs[index] as string, "mcp.json.cluster-snapshot.json")
      // A change made through the leader itself is in its snapshot too.
      expect((await (replicas[index] as StoreProcess).post("/for_store/add_service", { name: "snap", url: upstream.url, disabled: true })).status).toBe(200)
      const holds = () => existsSync(snapshot) && Object.keys((JSON.parse(readFileSync(snapshot, "utf8")) as { mcpServers: object }).mcpServers).sort().join() === "local,snap"
      expect(await eventually(holds, 5000, 20)).toBe(true)

      const [r0, r1, r2] = replicas as [StoreProcess, StoreProcess, StoreProcess]
      await r0.kill()
      expect((await r1.post("/for_store/add_service", { name: "after", url: upstream.url, disabled: true })).status).toBe(200)
      expect(await eventually(async () => (await names(r2)).join() === "after,local,snap", 5000, 20)).toBe(true)
      // Its registry entry expires with its heartbeat; the leader lease moves if it was the leader.
      expect(await eventually(async () => (await registered()) === 2, 10_000, 100)).toBe(true)
      expect(await eventually(async () => (await client.get(clusterKey("three", "lease", "leader"))) !== null, 10_000, 100)).toBe(true)
    } finally {
      client.destroy()
    }
  })
})
