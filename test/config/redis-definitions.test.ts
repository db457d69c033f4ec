/**
 * Shared definitions (docs/replicas.md): replicas on one real Redis are one store's definitions. The
 * first replica of an empty cluster imports its services file, a change made through any replica is
 * applied on the others through the stream, concurrent changes through two replicas both land, and
 * with Redis away changes answer 503 (nothing changed) while reads go on; when Redis comes back
 * empty, the definitions the replicas knew are written back.
 */
import { join } from "node:path"
import { createClient } from "redis"
import { describe, expect, it } from "vitest"
import { clusterKey } from "../../src/redis/key-names.js"
import { eventually, freshDir, hasRedisServer, useReplicaCluster, type TestServer } from "../support/index.js"

const names = async (server: TestServer): Promise<string[]> => {
  const reply = await server.get("/for_store/list_services")
  expect(reply.status).toBe(200)
  return (reply.body.services as Array<{ name: string }>).map((s) => s.name).sort()
}

/** Waits (bounded) until `server` lists exactly `expected`: the change travels through Redis. */
const listsSoon = async (server: TestServer, expected: string[]): Promise<void> => {
  let last: string[] = []
  const ok = await eventually(async () => JSON.stringify((last = await names(server))) === JSON.stringify(expected), 5000, 20)
  expect(ok ? expected : last).toEqual(expected)
}

describe.skipIf(!hasRedisServer)("replica mode: shared definitions", () => {
  const cluster = useReplicaCluster()
  const replica = (name: string, services?: unknown) => cluster.replica(name, services)

  it("seeds an empty cluster from the first replica's file and applies each replica's changes on the others", async () => {
    const a = await replica("defs", { mcpServers: { seeded: { url: cluster.upstream.url, disabled: true } } })
    // B's own file is ignored: the cluster is seeded already.
    const b = await replica("defs", { mcpServers: { ignored: { url: cluster.upstream.url, disabled: true } } })
    expect(await names(b)).toEqual(["seeded"])

    const added = await b.post("/for_store/add_service", { name: "two", url: cluster.upstream.url, disabled: true })
    expect(added.status).toBe(200)
    await listsSoon(a, ["seeded", "two"])

    // Two replicas changing at once: both changes land everywhere, in one order.
    const [x, y] = await Promise.all([
      a.post("/for_store/add_service", { name: "from-a", url: cluster.upstream.url, disabled: true }),
      b.post("/for_store/add_service", { name: "from-b", url: cluster.upstream.url, disabled: true })
    ])
    expect([x.status, y.status]).toEqual([200, 200])
    await listsSoon(a, ["from-a", "from-b", "seeded", "two"])
    await listsSoon(b, ["from-a", "from-b", "seeded", "two"])

    expect((await a.del("/for_store/delete_service/two")).status).toBe(200)
    await listsSoon(b, ["from-a", "from-b", "seeded"])

    // show_mcpconfig exports what Redis holds, on every replica.
    const shown = await b.get("/for_store/show_mcpconfig")
    expect(shown.status).toBe(200)
    expect(Object.keys(shown.body.config.mcpServers).sort()).toEqual(["from-a", "from-b", "seeded"])

    // The revision in Redis counts every change (seed + 4).
    const client = createClient({ url: cluster.redis.url })
    client.on("error", () => undefined)
    await client.connect()
    try {
      expect(await client.get(clusterKey("defs", "rev"))).toBe("5")
      expect(Object.keys(await client.hGetAll(clusterKey("defs", "defs"))).sort()).toEqual(["store/from-a", "store/from-b", "store/seeded"])
      // Each stream entry carries its change, which the other replicas apply without reading every definition again.
      const last = (await client.xRevRange(clusterKey("defs", "changes"), "+", "-", { COUNT: 1 }))?.[0]
      expect(last?.id).toBe("5-0")
      expect(JSON.parse(last!.message["change"]!)).toEqual({ set: {}, del: ["store/two"] })
    } finally {
      client.destroy()
    }
  })

  it("answers changes 503 while Redis is away, serves reads, and writes back what it knew when Redis returns empty", async () => {
    const a = await replica("outage", { mcpServers: { kept: { url: cluster.upstream.url, disabled: true } } })
    const b = await replica("outage")
    const agent = await a.post("/for_agent/agent-1/add_service", { name: "mine", url: cluster.upstream.url, disabled: true })
    expect(agent.status).toBe(200)
    await eventually(async () => (await b.get("/for_agent/agent-1/list_services")).body?.services?.length === 1, 5000, 20)

    await cluster.redis.stop()
    const refused = await b.post("/for_store/add_service", { name: "lost", url: cluster.upstream.url, disabled: true })
    expect(refused.status).toBe(503)
    expect(refused.body.error.code).toBe("SERVICE_UNAVAILABLE")
    expect(refused.body.error.details.reason).toBe("cluster_unavailable")
    expect(refused.body.message).toMatch(/Redis cannot be reached/)
    expect((await a.del("/for_store/delete_service/kept")).status).toBe(503)
    expect(await names(a)).toEqual(["kept"])
    expect(await names(b)).toEqual(["kept"])

    await cluster.redis.start()
    // Nothing acknowledged is lost: the definitions come back into the empty Redis.
    const client = createClient({ url: cluster.redis.url })
    client.on("error", () => undefined)
    await client.connect()
    try {
      const back = await eventually(async () => Object.keys(await client.hGetAll(clusterKey("outage", "defs"))).length === 2, 10_000, 50)
      expect(back).toBe(true)
      expect(Object.keys(await client.hGetAll(clusterKey("outage", "defs"))).sort()).toEqual(["agent/agent-1/mine", "store/kept"])
    } finally {
      client.destroy()
    }
    // And changes are taken again (the replica may need its reconnection first).
    const ok = await eventually(async () => (await b.post("/for_store/add_service", { name: "after", url: cluster.upstream.url, disabled: true })).status === 200, 10_000, 100)
    expect(ok).toBe(true)
    await listsSoon(a, ["after", "kept"])
  })

  it("refuses a wildcard listen address without --advertise-url, with a clear start-up error", async () => {
    const { resolveOptions } = await import("../../src/config/options.js")
    const { startServer } = await import("../../src/http/server.js")
    const dir = freshDir()
    const options = resolveOptions({ host: "0.0.0.0", port: 0, redis_url: cluster.redis.url, mcp_config_file: join(dir, "mcp.json"), show_startup_info: false })
    await expect(startServer({ server: options.server, store: options.store })).rejects.toThrow(/needs --advertise-url/)
    expect(() => resolveOptions({ cluster_name: "bad name" })).toThrow(/cluster_name must be/)
    expect(() => resolveOptions({ redis_url: "http://x" })).toThrow(/redis_url must be a URL/)
    expect(() => resolveOptions({ advertise_url: "http://10.0.0.5:1/path" })).toThrow(/advertise_url must be a base URL/)
    // The command line and the environment; the secret only from the environment, long enough.
    const { parseCommandLine } = await import("../../src/cli/command-line.js")
    const parsed = await parseCommandLine(["run", "api", "--cluster-name", "prod", "--lease-ms", "3000"], {
      MCPSTORE_REDIS_URL: "redis://:pw@10.0.0.9:6379",
      MCPSTORE_ADVERTISE_URL: "http://10.0.0.5:18200/",
      MCPSTORE_CLUSTER_SECRET: "0123456789abcdef"
    })
    expect(parsed.store.cluster).toEqual({ redisUrl: "redis://:pw@10.0.0.9:6379", name: "prod", advertiseUrl: "http://10.0.0.5:18200", leaseMs: 3000, secret: "0123456789abcdef" })
    await expect(parseCommandLine(["run", "api"], { MCPSTORE_REDIS_URL: cluster.redis.url, MCPSTORE_CLUSTER_SECRET: "short" })).rejects.toThrow(/at least 16 characters/)
    expect((await parseCommandLine(["run", "api"], { MCPSTORE_CLUSTER_SECRET: "0123456789abcdef" })).store.cluster).toBeUndefined()
  })
})
