/**
 * A replica cut off from Redis keeps its leases past their deadlines only on the promises of every
 * other replica it knows (docs/replicas.md, "Leases"), store processes on one real redis-server, each
 * through its own TCP proxy. Alone (no other replica known: one started with it may not have
 * registered yet when it last read the registry), nobody promised anything: its service stops at
 * its lease's deadline. With a peer that does not answer (stopped by SIGSTOP: alive for its
 * connections, silent; starved, it may still reach Redis), another's promise is not enough either:
 * the lease goes at its deadline, before any other replica takes it. The replica that runs the
 * service is started once for both: the first test has it alone in the cluster, the second starts
 * the peers beside it, and each begins by waiting for it to hold the service's lease.
 */
import { afterAll, describe, expect, it } from "vitest"
import { clusterKey } from "../../src/redis/key-names.js"
import { eventually, hasRedisServer, replicasListening, startRedisProxy, useReplicaProcesses, type RedisProxy, type StoreProcess } from "../support/index.js"

const CLUSTER = "cutoff"
const LEASE_MS = 4000
/** How long the promising replica's proxy holds each answer of Redis (ms): past the 250 ms a question waits, so it answers no. */
const SLOW_MS = 400

describe.skipIf(!hasRedisServer)("replica mode: a replica cut off from Redis", { timeout: 120_000 }, () => {
  const cluster = useReplicaProcesses({ cluster: CLUSTER, leaseMs: LEASE_MS })
  const proxies: RedisProxy[] = []
  afterAll(() => Promise.all(proxies.map((p) => p.close())))

  /** A replica that reaches Redis through a proxy of its own. */
  const start = async (services: object): Promise<{ readonly replica: StoreProcess; readonly proxy: RedisProxy }> => {
    const proxy = await startRedisProxy(cluster.redis)
    proxies.push(proxy)
    return { replica: await cluster.replica(services, { redisUrl: proxy.url }), proxy }
  }
  /**
   * The replica that runs the service `mine`, started by the first test that asks for it: the
   * tests share it (each heals its proxy and waits for it to hold the lease), not a second start.
   */
  let ownerStart: Promise<{ readonly replica: StoreProcess; readonly proxy: RedisProxy }> | undefined
  const startedOwner = () => (ownerStart ??= start({ mcpServers: { mine: { url: cluster.upstream.url } } }))
  /** One client for the lease lookups, which the waits below make many times a second (ended with the file's Redis). */
  let reader: ReturnType<typeof cluster.redis.connect> | undefined
  const holder = async (service: string) => (await (await (reader ??= cluster.redis.connect())).get(clusterKey(CLUSTER, "lease", `store/${service}`))) ?? ""
  const holds = (r: StoreProcess, h: string) => h.includes(`-${r.pid}-`)
  /** When a log line matching `pattern` was written (epoch ms) in its output from `from` on (a length it had), or undefined. */
  const loggedAt = (r: StoreProcess, pattern: RegExp, from = 0): number | undefined => {
    const line = r.output().slice(from).split("\n").find((l) => pattern.test(l))
    return line === undefined ? undefined : Date.parse(line.slice(0, 24))
  }
  const lastLines = (r: StoreProcess) => r.output().split("\n").slice(-30).join("\n")

  it("alone, it knows nobody who could vouch: its service stops when the lease expires, and it takes the lease back once Redis is back", async () => {
    const { replica, proxy } = await startedOwner()
    expect(await eventually(async () => holds(replica, await holder("mine")), 15_000, 50)).toBe(true)
    const from = replica.output().length
    proxy.cut()
    try {
      const lost = await eventually(async () => loggedAt(replica, /lease store\/mine lost by replica/, from) !== undefined, LEASE_MS + 5000, 50)
      expect(lost, lastLines(replica)).toBe(true)
      expect(replica.output().slice(from)).toContain("knows no other replica to vouch that nobody reaches it")
      expect(replica.output()).not.toContain("Redis is unreachable for every replica")
    } finally {
      proxy.heal()
    }
    const called = async () => (await replica.post("/for_store/call_tool", { tool_name: "mine__echo", args: { text: "back" } })).body.result === "back"
    expect(await eventually(called, 20_000, 100), lastLines(replica)).toBe(true)
  })

  it("with a peer that does not answer, another's promise does not keep its lease: it goes at its deadline, before another replica takes it", async () => {
    const owner = await startedOwner()
    expect(await eventually(async () => holds(owner.replica, await holder("mine")), 15_000, 50)).toBe(true)
    const promising = await start({ mcpServers: {} })
    const silent = await start({ mcpServers: {} })
    // The owner asks those its keeper last read (every ttl/3): all three registered with their URLs, then one keeper turn.
    const client = await cluster.redis.connect()
    expect(await eventually(async () => (await replicasListening(client, CLUSTER)) === 3, 15_000, 50)).toBe(true)
    await new Promise((resolve) => setTimeout(resolve, LEASE_MS / 3 + 500))

    promising.proxy.slow(SLOW_MS)
    silent.replica.child.kill("SIGSTOP")
    const from = owner.replica.output().length
    owner.proxy.cut()
    try {
      const lost = await eventually(async () => loggedAt(owner.replica, /lease store\/mine lost by replica/, from) !== undefined, LEASE_MS + 5000, 50)
      expect(lost, `the owner's last lines:\n${lastLines(owner.replica)}\nthe promising replica's:\n${lastLines(promising.replica)}`).toBe(true)
      // It was asked, and promised (Redis answered it late): that alone kept nothing.
      expect(promising.replica.output()).toContain("Redis is slow here, not away")
      expect(owner.replica.output()).not.toContain("Redis is unreachable for every replica")
    } finally {
      silent.replica.child.kill("SIGCONT")
      promising.proxy.slow(0)
    }
    // The silent one (or the other, once its promise runs out) takes the service over, after the owner dropped it.
    const other = async () => {
      const h = await holder("mine")
      return h !== "" && !holds(owner.replica, h)
    }
    expect(await eventually(other, 6 * LEASE_MS, 100)).toBe(true)
    // Its line comes once its SET NX is answered (the key is in Redis before that).
    const takerOf = () => [promising.replica, silent.replica].find((r) => loggedAt(r, /lease store\/mine taken by replica/) !== undefined)
    expect(await eventually(() => takerOf() !== undefined, 10_000, 50)).toBe(true)
    const taker = takerOf() as StoreProcess
    expect(loggedAt(taker, /lease store\/mine taken by replica/) as number).toBeGreaterThan(loggedAt(owner.replica, /lease store\/mine lost by replica/, from) as number)
    owner.proxy.heal()
  })
})
