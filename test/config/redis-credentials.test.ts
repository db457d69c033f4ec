// The per-user credentials of a cluster (src/config/redis-credentials.ts) against a real
// redis-server, two stores on two connections as two replicas: a credential put by one is found by
// the other and its change heard there; the cap of principals per service is kept in Redis even
// when the replicas race for the last place; a value sealed under another secret reads as none;
// forgetting a service removes its hash and is heard too.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { MAX_PRINCIPALS_PER_SERVICE } from "../../src/config/credentials-file.js"
import { CredentialsKeyError, RedisCredentials } from "../../src/config/redis-credentials.js"
import { ClusterConnection } from "../../src/redis/connection.js"
import { clusterKey } from "../../src/redis/key-names.js"
import { eventually, hasRedisServer, startRedisServer, type RedisServer } from "../support/index.js"

const CLUSTER = "creds"
const SECRET = "credentials-test-secret-0123456789"
const SERVICE = "store/crm"
const value = (token: string) => ({ headers: { Authorization: `Bearer ${token}` }, env: {} })

describe.skipIf(!hasRedisServer)("per-user credentials in a cluster's Redis", { timeout: 60_000 }, () => {
  let redis: RedisServer
  const connections: ClusterConnection[] = []
  const stores: RedisCredentials[] = []

  beforeAll(async () => {
    redis = await startRedisServer()
    for (let i = 0; i < 2; i++) {
      const connection = await ClusterConnection.open(redis.url)
      connections.push(connection)
      stores.push(await RedisCredentials.open(connection, CLUSTER, SECRET))
    }
  })
  afterAll(async () => {
    await Promise.all(stores.map((s) => s.close()))
    for (const c of connections) c.close()
    await redis?.stop()
  })

  it("a credential put through one replica is found through the other, and its change is heard there", async () => {
    const [a, b] = stores as [RedisCredentials, RedisCredentials]
    const heard: Array<[string, string | undefined]> = []
    const stop = b.onChange((service, principal) => heard.push([service, principal]))
    try {
      expect(await a.put(SERVICE, "alice", value("alice-token"))).toBe(true)
      expect(await b.find(SERVICE, "alice")).toEqual(value("alice-token"))
      expect(await eventually(() => heard.some(([s, p]) => s === SERVICE && p === "alice"), 2_000)).toBe(true)
      const raw = await (await redis.connect()).hGet(clusterKey(CLUSTER, "credentials", SERVICE), "alice")
      expect(raw).not.toContain("alice-token")
      expect(await b.remove(SERVICE, "alice")).toBe(true)
      expect(await a.find(SERVICE, "alice")).toBeUndefined()
      expect(await a.remove(SERVICE, "alice")).toBe(false)
    } finally {
      stop()
    }
  })

  it(`keeps at most ${MAX_PRINCIPALS_PER_SERVICE} principals per service, even when two replicas race for the last place`, async () => {
    const [a, b] = stores as [RedisCredentials, RedisCredentials]
    const service = "store/full"
    const client = await redis.connect()
    // Filled but one, directly (a thousand scripts would only be slower).
    const fields = Array.from({ length: MAX_PRINCIPALS_PER_SERVICE - 1 }, (_, i) => [`p${i}`, "x"] as [string, string])
    await client.hSet(clusterKey(CLUSTER, "credentials", service), fields)
    const race = await Promise.all([a.put(service, "first", value("1")), b.put(service, "second", value("2"))])
    expect(race.filter(Boolean)).toHaveLength(1)
    expect(await client.hLen(clusterKey(CLUSTER, "credentials", service))).toBe(MAX_PRINCIPALS_PER_SERVICE)
    // A principal already there may still change its own.
    expect(await a.put(service, "p0", value("changed"))).toBe(true)
  })

  it("a value sealed under another secret reads as none; forgetting a service removes its hash and is heard", async () => {
    const [a, b] = stores as [RedisCredentials, RedisCredentials]
    const other = await RedisCredentials.open(connections[0]!, CLUSTER, "another-secret-0123456789abcdef")
    try {
      expect(await other.put(SERVICE, "eve", value("eve-token"))).toBe(true)
      expect(await a.find(SERVICE, "eve")).toBeUndefined()
    } finally {
      await other.close()
    }
    const heard: Array<string | undefined> = []
    const stop = b.onChange((service, principal) => service === SERVICE && heard.push(principal ?? "*"))
    try {
      await a.forget(SERVICE)
      expect(await (await redis.connect()).exists(clusterKey(CLUSTER, "credentials", SERVICE))).toBe(0)
      expect(await eventually(() => heard.includes("*"), 2_000)).toBe(true)
    } finally {
      stop()
    }
    await expect(RedisCredentials.open(connections[0]!, CLUSTER, "")).rejects.toBeInstanceOf(CredentialsKeyError)
  })
})
