// The built-in authorization server's revocations in a cluster's Redis (src/http/oauth-server/
// redis-grant-state.ts) against a real redis-server: the copy every replica reads again on a timer
// must never drop a revocation made on the replica itself. A read of the copy sent just before a
// revocation (the two on one connection, so Redis runs them in that order) comes back without it;
// the replica still refuses the token, and so does the next read once Redis has it.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { RedisGrantState } from "../../src/http/oauth-server/redis-grant-state.js"
import { ClusterConnection } from "../../src/redis/connection.js"
import { hasRedisServer, startRedisServer, type RedisServer } from "../support/index.js"

describe.skipIf(!hasRedisServer)("revocations in a cluster's Redis", { timeout: 30_000 }, () => {
  let redis: RedisServer
  let connection: ClusterConnection
  let state: RedisGrantState

  beforeAll(async () => {
    redis = await startRedisServer()
    connection = await ClusterConnection.open(redis.url)
    state = await RedisGrantState.open({ client: connection.client, cluster: "revocations" })
  })
  afterAll(async () => {
    await state?.close()
    connection?.close()
    await redis?.stop()
  })

  it("a revocation made while the copy is being read again is kept, for a token and for a family", async () => {
    const reread = () => (state as unknown as { readRevoked(): Promise<void> }).readRevoked()
    const until = Date.now() + 60_000
    // The read is sent first: its copy is taken before the revocation is written.
    const reading = reread()
    const revoking = state.revokeToken("jti-1", until)
    await Promise.all([reading, revoking])
    expect(state.isRevoked("jti-1", "family-0")).toBe(true)
    const family = reread()
    await Promise.all([family, state.revokeFamily("family-1", until)])
    expect(state.isRevoked("jti-2", "family-1")).toBe(true)
    // The next copy has both from Redis itself.
    await reread()
    expect(state.isRevoked("jti-1", "family-0")).toBe(true)
    expect(state.isRevoked("jti-2", "family-1")).toBe(true)
    expect(state.isRevoked("jti-3", "family-3")).toBe(false)
  })
})
