// OAuth entries shared by replicas in Redis (RedisTokenStore) against a real redis-server: an entry
// put by one replica is read by another, encrypted at rest; no secret, or another secret, is a clear
// start-up error; the refresh lock lets one replica at a time refresh a service and gives the
// waiter the tokens the first got; a holder whose lock expired never releases its successor's; each
// principal's own entry of a per_user service is kept apart and listed by the service's prefix; an
// entry written on SDK 1.x (bound to the discovery URL, or unstamped) is read bound as SDK v2 binds it.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { clusterKey } from "../../src/redis/key-names.js"
import { withLock } from "../../src/redis/lock.js"
import type { Redis } from "../../src/redis/connection.js"
import { RedisTokenStore, TokenKeyError } from "../../src/config/redis-token-vault.js"
import { keyOfSecret, seal, type VaultEntry } from "../../src/config/token-vault.js"
import { principalKey, serviceKey } from "../../src/runtime/upstream-oauth.js"
import { hasRedisServer, startRedisServer, type RedisServer } from "../support/index.js"

let redis: RedisServer
const stores: RedisTokenStore[] = []
let seq = 0

const connect = (): Promise<Redis> => redis.connect()
const open = async (cluster: string, options: { secret?: string; lockTtlMs?: number } = {}) => {
  const store = await RedisTokenStore.open({ client: await connect(), cluster }, { secret: "s3cret", ...options })
  stores.push(store)
  return store
}
const entry = (service: string, access: string): VaultEntry => ({
  issuer: "https://auth.example",
  scope: "",
  service,
  origin: "https://api.example",
  tokens: { access_token: access, token_type: "Bearer", refresh_token: `refresh-${access}`, obtained_at: 1 }
})
/** A promise and its resolve. */
const deferred = () => {
  let resolve!: () => void
  const promise = new Promise<void>((r) => (resolve = r))
  return { promise, resolve }
}

beforeAll(async () => {
  if (hasRedisServer) redis = await startRedisServer()
})
afterEach(async () => {
  await Promise.all(stores.splice(0).map((s) => s.close()))
  redis?.disconnectAll()
})
afterAll(() => redis?.stop())

describe.skipIf(!hasRedisServer)("OAuth tokens in Redis", () => {
  it("are shared by the replicas, encrypted at rest, and forgotten everywhere", async () => {
    const cluster = `tokens-${seq++}`
    const a = await open(cluster)
    const b = await open(cluster)
    const heard = new Promise<string>((resolve) => b.onChange(resolve))
    await a.put(entry("store/svc", "access-one"))
    expect(await heard).toBe("store/svc")
    expect(b.find("store/svc")?.tokens?.access_token).toBe("access-one")
    const raw = await redis.clients[0]!.hGet(clusterKey(cluster, "oauth"), "store/svc")
    expect(raw).not.toBeNull()
    expect(raw).not.toContain("access-one")
    expect(raw).not.toContain("refresh-")
    // A replica started later reads it at start.
    const c = await open(cluster)
    expect(c.find("store/svc")?.tokens?.access_token).toBe("access-one")
    const gone = new Promise<string>((resolve) => c.onChange(resolve))
    await b.remove("store/svc")
    await gone
    expect(c.find("store/svc")).toBeUndefined()
    expect(await redis.clients[0]!.hExists(clusterKey(cluster, "oauth"), "store/svc")).toBe(0)
  })

  it("keeps each principal's own entry of a per_user service apart, lists them by the service's prefix, and shares them", async () => {
    const cluster = `tokens-${seq++}`
    const a = await open(cluster)
    const b = await open(cluster)
    const alice = principalKey({ kind: "store" }, "svc", "alice-digest")
    const bob = principalKey({ kind: "store" }, "svc", "bob-digest")
    const heard = new Promise<void>((resolve) => b.onChange((s) => s === bob && resolve()))
    await a.put(entry("store/svc", "shared"))
    await a.put(entry(alice, "alice-token"))
    await a.put(entry(bob, "bob-token"))
    await a.put(entry("store/svc-other", "other"))
    await heard
    const under = `${serviceKey({ kind: "store" }, "svc")}\u0000`
    expect(b.entriesUnder(under).map((e) => e.tokens?.access_token).sort()).toEqual(["alice-token", "bob-token"])
    expect(b.find("store/svc")?.tokens?.access_token).toBe("shared")
    // A replica started later reads them (the NUL of the key survives Redis), and removing one leaves the others.
    const c = await open(cluster)
    expect(c.find(alice)?.tokens?.access_token).toBe("alice-token")
    await c.remove(alice)
    expect(c.entriesUnder(under).map((e) => e.service)).toEqual([bob])
    expect(a.find("store/svc")?.tokens?.access_token).toBe("shared")
  })

  it("refuses to start without MCPSTORE_SECRET_KEY, or with another secret than the cluster's", async () => {
    const cluster = `tokens-${seq++}`
    const saved = process.env["MCPSTORE_SECRET_KEY"]
    delete process.env["MCPSTORE_SECRET_KEY"]
    try {
      await expect(RedisTokenStore.open({ client: await connect(), cluster })).rejects.toThrow(/set MCPSTORE_SECRET_KEY to the same secret on every replica/)
    } finally {
      if (saved !== undefined) process.env["MCPSTORE_SECRET_KEY"] = saved
    }
    await open(cluster, { secret: "first" })
    const refused = open(cluster, { secret: "second" })
    await expect(refused).rejects.toBeInstanceOf(TokenKeyError)
    await expect(refused).rejects.toThrow(/not the secret the cluster's OAuth tokens were encrypted with/)
  })

  it("lets one replica at a time refresh a service, and gives the next the tokens the first got", async () => {
    const cluster = `tokens-${seq++}`
    const a = await open(cluster)
    const b = await open(cluster)
    await a.put(entry("store/svc", "old"))
    let active = 0
    let most = 0
    const aInside = deferred()
    const aMayFinish = deferred()
    const first = a.exclusive("store/svc", async (latest) => {
      active += 1
      most = Math.max(most, active)
      expect(latest?.tokens?.access_token).toBe("old")
      aInside.resolve()
      await aMayFinish.promise
      await a.put(entry("store/svc", "new"))
      active -= 1
      return "a refreshed"
    })
    await aInside.promise
    let bRan = false
    const second = b.exclusive("store/svc", async (latest) => {
      bRan = true
      active += 1
      most = Math.max(most, active)
      active -= 1
      return latest?.tokens?.access_token
    })
    // b is waiting on the lock: it has not run while a holds it.
    await new Promise<void>((resolve) => setImmediate(resolve))
    expect(bRan).toBe(false)
    aMayFinish.resolve()
    expect(await first).toBe("a refreshed")
    expect(await second).toBe("new")
    expect(most).toBe(1)
    // Another service's lock is another lock.
    expect(await b.exclusive("store/other", async () => "free")).toBe("free")
  })

  it("tells a refresh under the lock to stop while the lock still holds (a refresh slower than the lock)", async () => {
    const cluster = `tokens-${seq++}`
    const store = await open(cluster, { lockTtlMs: 600 })
    const client = await connect()
    const key = clusterKey(cluster, "oauth", "lock", "store/svc")
    const seen = await store.exclusive("store/svc", async (_latest, lapse) => {
      expect(lapse?.aborted).toBe(false)
      await new Promise((resolve) => lapse?.addEventListener("abort", resolve, { once: true }))
      // Told while the lock is still this task's: nobody else can be refreshing yet.
      return { held: await client.get(key), reason: String((lapse?.reason as Error | undefined)?.message) }
    })
    expect(seen.held).not.toBeNull()
    expect(seen.reason).toMatch(/longer than 300 ms, as long as it may hold the cluster's refresh lock/)
    expect(await client.get(key)).toBeNull()
  })

  it("never releases a successor's lock when the holder outlived its TTL", async () => {
    const client = await connect()
    const key = clusterKey(`tokens-${seq++}`, "oauth", "lock", "store/svc")
    const bInside = deferred()
    const aReleased = deferred()
    const first = withLock(client, key, { ttlMs: 100, waitMs: 1_000 }, async () => {
      await bInside.promise // b takes it only once a's TTL is over
      return "a"
    }).finally(aReleased.resolve)
    const second = withLock(client, key, { ttlMs: 10_000, waitMs: 5_000, retryMs: 20 }, async () => {
      bInside.resolve()
      await aReleased.promise
      // a's release ran (compare-and-delete): b's lock is still there.
      return client.get(key)
    })
    expect(await first).toBe("a")
    expect(await second).not.toBeNull()
    expect(await client.get(key)).toBeNull()
  })

  it("reads an entry written on SDK 1.x bound to its authorization server's issuer", async () => {
    const cluster = `tokens-${seq++}`
    // As a replica on SDK 1.x kept it: bound to the URL discovery used, the registration unstamped.
    const old = {
      ...entry("store/old", "access-old"),
      issuer: "https://auth.example/",
      client: { client_id: "registered", redirect_uris: ["https://store.example/oauth/callback"] },
      discovery: { authorizationServerUrl: "https://auth.example/", authorizationServerMetadata: { issuer: "https://auth.example", authorization_endpoint: "https://auth.example/a", token_endpoint: "https://auth.example/t", response_types_supported: ["code"] } }
    }
    const a = await open(cluster)
    await redis.clients[0]!.hSet(clusterKey(cluster, "oauth"), "store/old", seal(keyOfSecret("s3cret"), JSON.stringify(old)))
    const b = await open(cluster)
    const read = b.find("store/old")
    expect([read?.issuer, read?.client?.issuer, read?.tokens?.issuer]).toEqual(["https://auth.example", "https://auth.example", "https://auth.example"])
    expect(read?.tokens?.access_token).toBe("access-old")
    // Read under the refresh lock (what a refresh is given): bound too.
    expect(await a.exclusive("store/old", async (latest) => latest?.client?.issuer)).toBe("https://auth.example")
  })
})
