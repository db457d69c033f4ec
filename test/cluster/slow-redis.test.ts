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
import { afterAll, describe, expect, it } from "vitest"
import { clusterKey } from "../../src/redis/key-names.js"
import { eventually, hasRedisServer, replicasListening, startRedisProxy, useReplicaProcesses, type RedisProxy, type StoreProcess } from "../support/index.js"

const CLUSTER = "slow"
const LEASE_MS = 4000
/** How long the slow replica's proxy holds each answer of Redis (ms): past the 250 ms a question waits, within the probe's second. */
const SLOW_MS = 400

describe.skipIf(!hasRedisServer)("replica mode: Redis slow for one replica while another is cut off", { timeout: 120_000 }, () => {
  const cluster = useReplicaProcesses({ cluster: CLUSTER, leaseMs: LEASE_MS })
  const proxies: RedisProxy[] = []
  afterAll(() => Promise.all(proxies.map((p) => p.close())))

  /** A replica that reaches Redis through a proxy of its own. */
  const start = async (services: object): Promise<{ readonly replica: StoreProcess; readonly proxy: RedisProxy }> => {
    const proxy = await startRedisProxy(cluster.redis)
    proxies.push(proxy)
    return { replica: await cluster.replica(services, { redisUrl: proxy.url }), proxy }
  }

  it("the slow replica takes over the services of a killed replica while it promises the cut-off one to take none of its leases", async () => {
    const client = await cluster.redis.connect()
    const leaseKey = (name: string) => clusterKey(CLUSTER, "lease", `store/${name}`)
    const holder = async (name: string) => (await client.get(leaseKey(name))) ?? ""
    const holds = (r: StoreProcess, h: string) => h.includes(`-${r.pid}-`)

    // Two replicas share two services, one each (the first hands one over to the second).
    const first = await start({ mcpServers: { kit: { url: cluster.upstream.url }, mine: { url: cluster.upstream.url } } })
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
