// Single-flight OAuth across replicas, end to end: two replicas' OAuthManagers on one RedisTokenStore
// cluster and a real authorization server (test/fixtures/oauth-server.ts). Both are refused by the
// upstream at once; one asks the token endpoint, the other waits on the lock and takes its token. A
// refresh slower than the lock stops while the lock holds, and the next one gets a token.
import { createClient } from "redis"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { Redis } from "../../src/redis/connection.js"
import { RedisTokenStore } from "../../src/config/redis-token-vault.js"
import { clusterKey } from "../../src/redis/key-names.js"
import { STORE_SCOPE } from "../../src/domain/service-definition.js"
import { OAuthManager } from "../../src/runtime/upstream-oauth.js"
import { MACHINE_CLIENT, startOAuthFixture, type OAuthFixture } from "../fixtures/oauth-server.js"
import { hasRedisServer, startRedisServer, type RedisServer } from "../support/index.js"

let redis: RedisServer
let fixture: OAuthFixture
beforeAll(async () => {
  if (!hasRedisServer) return
  redis = await startRedisServer()
  fixture = await startOAuthFixture({ accessTtlSeconds: 3600 })
})
afterAll(async () => {
  await fixture?.stop()
  await redis?.stop()
})

describe.skipIf(!hasRedisServer)("OAuth refreshes across replicas", () => {
  it("ask the token endpoint once when two replicas need a token at the same moment", async () => {
    const clients: Redis[] = []
    const stores: RedisTokenStore[] = []
    try {
      const replica = async () => {
        const client = createClient({ url: redis.url })
        client.on("error", () => undefined)
        await client.connect()
        clients.push(client)
        const store = await RedisTokenStore.open({ client, cluster: "oauth-refresh" }, { secret: "s3cret" })
        stores.push(store)
        return new OAuthManager(store, () => undefined, () => undefined, globalThis.fetch)
      }
      const config = { client_id: MACHINE_CLIENT.client_id, client_secret: MACHINE_CLIENT.client_secret, grant_type: "client_credentials" as const }
      const [a, b] = [await replica(), await replica()]
      const authA = a.forService(STORE_SCOPE, "machine", fixture.url, config)
      const authB = b.forService(STORE_SCOPE, "machine", fixture.url, config)
      const before = fixture.counts.client_credentials
      await Promise.all([authA.unauthorized({}, undefined, false), authB.unauthorized({}, undefined, false)])
      expect(fixture.counts.client_credentials - before).toBe(1)
      const token = await authA.accessToken()
      expect(token).toEqual(expect.any(String))
      expect(await authB.accessToken()).toBe(token)
    } finally {
      await Promise.all(stores.map((s) => s.close()))
      for (const c of clients) c.destroy()
    }
  })

  it("a refresh the token endpoint holds longer than the lock stops while the lock holds; the next one gets a token", async () => {
    const client = createClient({ url: redis.url })
    client.on("error", () => undefined)
    await client.connect()
    const store = await RedisTokenStore.open({ client, cluster: "oauth-slow" }, { secret: "s3cret", lockTtlMs: 1000 })
    const release = fixture.holdClientCredentials()
    try {
      const manager = new OAuthManager(store, () => undefined, () => undefined, globalThis.fetch)
      const config = { client_id: MACHINE_CLIENT.client_id, client_secret: MACHINE_CLIENT.client_secret, grant_type: "client_credentials" as const }
      const auth = manager.forService(STORE_SCOPE, "slow", fixture.url, config)
      await expect(auth.unauthorized({}, undefined, false)).rejects.toThrow(/longer than 500 ms, as long as it may hold the cluster's refresh lock/)
      // Given back: the next refresh takes it at once.
      expect(await client.get(clusterKey("oauth-slow", "oauth", "lock", "store/slow"))).toBeNull()
      release()
      await auth.unauthorized({}, undefined, false)
      expect(await auth.accessToken()).toEqual(expect.any(String))
    } finally {
      release()
      await store.close()
      client.destroy()
    }
  })
})
