/** The test Redis itself: started on a free port, empty after a restart (no persistence), gone after stop. */
import { createClient } from "redis"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { hasRedisServer, processGone, startRedisServer, type RedisServer } from "../support/index.js"

describe.skipIf(!hasRedisServer)("the test Redis server", () => {
  let redis: RedisServer
  beforeAll(async () => {
    redis = await startRedisServer()
  })
  afterAll(() => redis?.stop())

  it("serves on its URL, forgets everything on restart, and leaves no process", async () => {
    const client = createClient({ url: redis.url })
    client.on("error", () => undefined)
    await client.connect()
    await client.set("k", "v")
    expect(await client.get("k")).toBe("v")
    client.destroy()
    const pid = redis.pid()
    await redis.stop()
    expect(processGone(pid)).toBe(true)
    await redis.start()
    const again = createClient({ url: redis.url })
    again.on("error", () => undefined)
    await again.connect()
    expect(await again.get("k")).toBeNull()
    again.destroy()
  })
})
