/**
 * The leases (src/cluster/leases.ts) on a real Redis: the compare-and-set scripts touch only the
 * holder's keys, two replicas split the leases by their fair share, a release hands them over at
 * once, and a holder that cannot renew drops its lease before Redis expires the key (no two owners);
 * a promise to take none and a vouching through an outage hold for the leases they name alone.
 */
import { createClient } from "redis"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { Redis } from "../../src/redis/connection.js"
import { fairShare, Leases, releasedChannel, RENEW, type LeasesOptions } from "../../src/cluster/leases.js"
import { RELEASE } from "../../src/redis/lock.js"
import { eventually, hasRedisServer, startRedisServer, type RedisServer } from "../support/index.js"

describe.skipIf(!hasRedisServer)("leases", () => {
  let redis: RedisServer
  let client: Redis
  const tables: Leases[] = []
  const table = (cluster: string, replicaId: string, ttlMs: number, lost: (label: string) => void = () => undefined, more: Pick<LeasesOptions, "vouchedUntil" | "quietUntil" | "now"> = {}) => {
    const t = new Leases(client, { cluster, replicaId, ttlMs, ...more }, { taken: () => undefined, lost })
    tables.push(t)
    return t
  }

  beforeAll(async () => {
    redis = await startRedisServer()
    client = createClient({ url: redis.url }) as Redis
    client.on("error", () => undefined)
    await client.connect()
  })
  afterAll(async () => {
    for (const t of tables) t.close()
    client?.destroy()
    await redis?.stop()
  })

  it("renews only the holder's keys, takes back a key Redis lost, and releases only the holder's keys", async () => {
    await client.set("k1", "a", { expiration: { type: "PX", value: 10_000 } })
    await client.set("k2", "b", { expiration: { type: "PX", value: 10_000 } })
    expect(await client.eval(RENEW, { keys: ["k1", "k2", "k3"], arguments: ["a", "60000"] })).toEqual([1, 0, 1])
    expect(await client.pTTL("k1")).toBeGreaterThan(10_000)
    expect(await client.pTTL("k2")).toBeLessThanOrEqual(10_000)
    expect(await client.get("k3")).toBe("a")
    expect(await client.pTTL("k3")).toBeGreaterThan(10_000)
    expect(await client.eval(RELEASE, { keys: ["k1", "k2"], arguments: ["b"] })).toBe(1)
    expect(await client.get("k1")).toBe("a")
    expect(await client.get("k2")).toBeNull()
  })

  it("splits leases by fair share, and a release hands them over at once (with a message)", async () => {
    const labels = ["store/a", "store/b", "store/c", "agent/x/d"]
    const a = table("share", "replica-a", 10_000)
    const b = table("share", "replica-b", 10_000)
    expect(fairShare(4, 2)).toBe(2)
    expect(fairShare(5, 2)).toBe(3)
    expect(fairShare(3, 0)).toBe(3)
    expect(await a.claim(labels, fairShare(labels.length, 2))).toEqual(["store/a", "store/b"])
    expect(await b.claim(labels, fairShare(labels.length, 2))).toEqual(["store/c", "agent/x/d"])
    expect(await client.get(a.key("store/a"))).toBe("replica-a")

    const subscriber = client.duplicate()
    subscriber.on("error", () => undefined)
    await subscriber.connect()
    const heard = new Promise<string>((resolve) => void subscriber.subscribe(releasedChannel("share"), resolve))
    await new Promise((r) => setImmediate(r))
    await a.release()
    expect(await heard).toBe("replica-a")
    await subscriber.unsubscribe()
    subscriber.destroy()
    expect(a.owned()).toEqual([])
    expect(await b.claim(labels, fairShare(labels.length, 1))).toEqual(["store/a", "store/b"])
    expect([...b.owned()].sort()).toEqual([...labels].sort())
    // Renewal keeps them; a key taken away is lost at the next renewal.
    await client.set(b.key("store/c"), "intruder")
    const lost: string[] = []
    const c = table("share", "replica-b", 10_000, (l) => lost.push(l))
    await client.del(c.key("store/a"))
    expect(await c.claim(["store/a"], 1)).toEqual(["store/a"])
    await client.set(c.key("store/a"), "intruder")
    await c.renew()
    expect(lost).toEqual(["store/a"])
    expect(c.owned()).toEqual([])
  })

  it("drops a lease that was not renewed before Redis lets it expire", async () => {
    let lostAt = 0
    const dropped = new Promise<string>((resolve) => {
      const t = table("deadline", "replica-a", 600, (label) => {
        lostAt = performance.now()
        resolve(label)
      })
      void t.claim(["store/s"], 1)
    })
    const started = performance.now()
    expect(await dropped).toBe("store/s")
    // Lost on this replica while the key still exists in Redis: nobody else could hold it yet.
    expect(await client.pTTL("mcp-store:{deadline}:lease:store/s")).toBeGreaterThan(0)
    expect(lostAt - started).toBeLessThan(600)
  })

  it("keeps a lease past its deadline while vouched for (Redis away for everyone), and drops it when the vouching ends, or at once when it is withdrawn", async () => {
    let vouchedUntil = Date.now() + 60_000
    const lost: string[] = []
    const t = table("vouched", "replica-a", 300, (label) => lost.push(label), { vouchedUntil: () => vouchedUntil })
    expect(await t.claim(["store/v", "store/w"], 2)).toEqual(["store/v", "store/w"])
    await new Promise((resolve) => setTimeout(resolve, 600))
    expect(lost).toEqual([])
    expect(t.owns("store/v")).toBe(true)
    // Withdrawn (another replica reaches Redis): dropped when looked at.
    vouchedUntil = 0
    t.expire()
    expect(lost.sort()).toEqual(["store/v", "store/w"])
    expect(t.owns("store/v")).toBe(false)

    // Lapsed (no new promise came): dropped by the timer set at its end, without a call.
    const ended: string[] = []
    let until = Date.now() + 60_000
    const u = table("vouched-lapse", "replica-a", 300, (label) => ended.push(label), { vouchedUntil: () => until })
    expect(await u.claim(["store/x"], 1)).toEqual(["store/x"])
    await new Promise((resolve) => setTimeout(resolve, 400))
    until = Date.now() + 200
    u.expire()
    expect(ended).toEqual([])
    expect(await eventually(() => ended.length === 1, 2000, 10)).toBe(true)
  })

  it("names no lease past its deadline in a question, even before the expiry timer fired (a starved process); one vouched for is still named", async () => {
    // A fake clock: the deadline passes without the timer (set at the real deadline, 10 s away) firing.
    let clock = Date.now()
    const lost: string[] = []
    let vouched = 0
    const t = table("named", "replica-a", 10_000, (label) => lost.push(label), { now: () => clock, vouchedUntil: (label) => (label === "store/v" ? vouched : 0) })
    expect(await t.claim(["store/late", "store/v"], 2)).toEqual(["store/late", "store/v"])
    expect(t.heldNow()).toEqual(["store/late", "store/v"])
    clock += 10_000
    vouched = clock + 5000
    // Still held until something looks: what `owned` alone would have named.
    expect(t.owned()).toEqual(["store/late", "store/v"])
    expect(t.heldNow()).toEqual(["store/v"])
    expect(lost).toEqual(["store/late"])
    // Its key is still this replica's in Redis, so nobody else holds it while it was dropped here.
    expect(await client.get(t.key("store/late"))).toBe("replica-a")
    clock = vouched
    expect(t.heldNow()).toEqual([])
    expect(lost).toEqual(["store/late", "store/v"])
  })

  it("takes no lease while it promised to take none, and gives back one whose SET NX was answered after the promise", async () => {
    let quietUntil = Date.now() + 60_000
    const t = table("quiet", "replica-b", 5000, undefined, { quietUntil: () => quietUntil })
    expect(await t.claim(["store/q"], 1)).toEqual([])
    expect(await client.get("mcp-store:{quiet}:lease:store/q")).toBeNull()
    // Not promised when the claim starts, promised by the time its SET NX is answered.
    quietUntil = 0
    let asked = 0
    const u = table("quiet", "replica-b", 5000, undefined, { quietUntil: () => (++asked > 1 ? Date.now() + 60_000 : 0) })
    expect(await u.claim(["store/q"], 1)).toEqual([])
    expect(asked).toBeGreaterThan(1)
    expect(await eventually(async () => (await client.get("mcp-store:{quiet}:lease:store/q")) === null, 2000, 10)).toBe(true)
  })

  it("takes no lease once it stops taking (a replica leaving), also none its claim under way gets from Redis", async () => {
    const t = table("leaving", "replica-l", 5000)
    t.stopTaking()
    expect(await t.claim(["store/l"], 1)).toEqual([])
    expect(await client.get("mcp-store:{leaving}:lease:store/l")).toBeNull()
    // Stopped while its SET NX is on its way (the leaving replica's listener closes meanwhile): given back.
    const u = table("leaving", "replica-m", 5000)
    const set = client.set.bind(client)
    const writable = client as unknown as { set: typeof set }
    let sets = 0
    writable.set = ((...args: Parameters<typeof set>) => {
      sets += 1
      u.stopTaking()
      return set(...args)
    }) as typeof set
    try {
      expect(await u.claim(["store/l"], 1)).toEqual([])
    } finally {
      writable.set = set
    }
    expect(sets).toBe(1)
    expect(await eventually(async () => (await client.get("mcp-store:{leaving}:lease:store/l")) === null, 2000, 10)).toBe(true)
    expect(u.owns("store/l")).toBe(false)
  })

  it("a promise and a vouching are per lease: the leases promised are not taken, the others are; only the leases vouched for are kept past their deadlines", async () => {
    const promised = Date.now() + 60_000
    const t = table("per-lease", "replica-b", 5000, undefined, { quietUntil: (label) => (label === "store/kept" ? promised : 0) })
    expect(await t.claim(["store/kept", "store/free"], 2)).toEqual(["store/free"])
    expect(await client.get("mcp-store:{per-lease}:lease:store/kept")).toBeNull()

    const lost: string[] = []
    const u = table("per-lease-vouched", "replica-a", 300, (label) => lost.push(label), { vouchedUntil: (label) => (label === "store/v" ? Date.now() + 60_000 : 0) })
    expect((await u.claim(["store/v", "store/w"], 2)).length).toBe(2)
    expect(await eventually(() => lost.length > 0, 2000, 10)).toBe(true)
    expect(lost).toEqual(["store/w"])
    expect(u.owns("store/v")).toBe(true)
  })
})
