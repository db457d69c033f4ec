/**
 * A Redis that is slow for one replica, not away (docs/replicas.md, "Leases"): three store processes
 * on one real redis-server, each through its own TCP proxy. One replica's proxy holds Redis's
 * answers 400 ms (more than the 250 ms a replica asked about Redis waits, less than the second its
 * probe allows), another replica is cut off from Redis and keeps asking the others whether they
 * reach it, and the third, which runs a service, is SIGKILLed. The slow replica answers no to each
 * question, a promise to take none of the leases the cut-off replica holds, and says that Redis
 * answered it late; it takes the killed replica's service all the same, while the cut-off replica
 * keeps its own service (never two owners), which it renews once it reaches Redis again.
 */
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { clusterKey } from "../../src/redis/key-names.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { eventually, freshDir, hasRedisServer, replicasListening, spawnStore, startRedisProxy, startRedisServer, useReplicaSecret, type RedisProxy, type RedisServer, type StoreProcess } from "../support/index.js"

const CLUSTER = "slow"
const LEASE_MS = 4000
/** How long the slow replica's proxy holds each answer of Redis (ms): past the 250 ms a question waits, within the probe's second. */
const SLOW_MS = 400

describe.skipIf(!hasRedisServer)("replica mode: Redis slow for one replica while another is cut off", { timeout: 120_000 }, () => {
  let redis: RedisServer
  let upstream: HttpFixture
  let restoreSecret: (() => void) | undefined
  const replicas: StoreProcess[] = []
  const proxies: RedisProxy[] = []

  /** A replica that reaches Redis through a proxy of its own. */
  const start = async (services: object): Promise<{ readonly replica: StoreProcess; readonly proxy: RedisProxy }> => {
    const dir = freshDir()
    writeFileSync(join(dir, "mcp.json"), JSON.stringify(services))
    const proxy = await startRedisProxy(redis)
    proxies.push(proxy)
    const replica = await spawnStore({ configFile: join(dir, "mcp.json"), extraArgs: ["--redis-url", proxy.url, "--cluster-name", CLUSTER, "--lease-ms", String(LEASE_MS), "--log-level", "info"] })
    replicas.push(replica)
    return { replica, proxy }
  }

  beforeAll(async () => {
    restoreSecret = useReplicaSecret()
    ;[redis, upstream] = await Promise.all([startRedisServer(), startHttpFixture()])
  })
  afterAll(async () => {
    if (process.env["REPLICA_LOGS"] !== undefined) replicas.forEach((r, i) => writeFileSync(`${process.env["REPLICA_LOGS"]}-${i}.log`, r.output()))
    redis?.disconnectAll()
    restoreSecret?.()
    await Promise.all(replicas.map((r) => r.kill()))
    await Promise.all([redis?.stop(), upstream?.stop(), ...proxies.map((p) => p.close())])
  })

  it("the slow replica takes over the services of a killed replica while it promises the cut-off one to take none of its leases", async () => {
    const client = await redis.connect()
    const leaseKey = (name: string) => clusterKey(CLUSTER, "lease", `store/${name}`)
    const holder = async (name: string) => (await client.get(leaseKey(name))) ?? ""
    const holds = (r: StoreProcess, h: string) => h.includes(`-${r.pid}-`)

    // Two replicas share two services, one each (the first hands one over to the second).
    const first = await start({ mcpServers: { kit: { url: upstream.url }, mine: { url: upstream.url } } })
    const second = await start({ mcpServers: {} })
    const split = async () => {
      const [kit, mine] = [await holder("kit"), await holder("mine")]
      return [first.replica, second.replica].every((r) => holds(r, kit) !== holds(r, mine)) && kit !== "" && mine !== ""
    }
    expect(await eventually(split, 30_000, 100)).toBe(true)
    const crashed = holds(first.replica, await holder("kit")) ? first : second
    const cut = crashed === first ? second : first
    const slow = await start({ mcpServers: {} })

    // The cut-off replica asks those its keeper last read (every ttl/3): all three registered with their URLs, then one keeper turn.
    expect(await eventually(async () => (await replicasListening(client, CLUSTER)) === 3, 15_000, 50)).toBe(true)
    await new Promise((resolve) => setTimeout(resolve, LEASE_MS / 3 + 500))
    const waited = await slow.replica.post("/for_store/wait_service", { client_id_or_service_name: "kit", status: "healthy", timeout: 15 })
    expect(waited.body.data?.final_status).toBe("healthy")

    slow.proxy.slow(SLOW_MS)
    cut.proxy.cut()
    crashed.replica.child.kill("SIGKILL")
    await crashed.replica.exited

    const lines = (r: StoreProcess) => r.output().split("\n").slice(-30).join("\n")
    // Within a few lease times: the killed replica's key expires, and the slow replica's keeper takes it.
    const taken = await eventually(async () => holds(slow.replica, await holder("kit")), 6 * LEASE_MS, 100)
    expect(taken, `the slow replica's last lines:\n${lines(slow.replica)}\nthe cut-off replica's:\n${lines(cut.replica)}`).toBe(true)
    // Called once the slow replica knows it runs the service (its SET NX answered: the key is in Redis before that).
    expect(await eventually(() => slow.replica.output().includes("lease store/kit taken by replica"), 10_000, 50)).toBe(true)
    const called = await eventually(async () => (await slow.replica.post("/for_store/call_tool", { tool_name: "kit__echo", args: { text: "moved" } })).body.result === "moved", 15_000, 100)
    expect(called).toBe(true)

    // It was asked, and answered no (Redis answered it late): the cut-off replica keeps its service.
    expect(slow.replica.output()).toContain("Redis is slow here, not away")
    expect(cut.replica.output()).toContain("Redis is unreachable for every replica")
    expect(cut.replica.output()).not.toMatch(/lease store\/mine lost by replica/)
    expect((await cut.replica.post("/for_store/call_tool", { tool_name: "mine__echo", args: { text: "kept" } })).body.result).toBe("kept")
    // Never two owners: the slow replica never took the cut-off replica's lease.
    expect(slow.replica.output()).not.toMatch(/lease store\/mine taken by replica/)
    expect(holds(slow.replica, await holder("mine"))).toBe(false)

    // Back on Redis, the cut-off replica renews its lease (taking its key back).
    cut.proxy.heal()
    expect(await eventually(async () => holds(cut.replica, await holder("mine")), 15_000, 100)).toBe(true)
    expect(slow.replica.output()).not.toMatch(/lease store\/mine taken by replica/)
  })
})
