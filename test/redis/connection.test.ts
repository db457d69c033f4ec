/**
 * The replica's Redis connection (src/redis/connection.ts) against a real redis-server frozen with
 * SIGSTOP: while the replica starts, a missed liveness probe refuses nothing (a command is sent,
 * bounded by its time-out, and answered once Redis wakes up); once `started()`, a command is refused
 * at once while Redis is known not to answer. And `answeredWithin`, which says whether an answer came
 * in time by the clock.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { answeredWithin, ClusterConnection, RedisAway } from "../../src/redis/connection.js"
import { eventually, hasRedisServer, startRedisServer, type RedisServer } from "../support/index.js"

describe.skipIf(!hasRedisServer)("the replica's Redis connection, Redis frozen", { timeout: 30_000 }, () => {
  let redis: RedisServer
  beforeAll(async () => {
    redis = await startRedisServer()
  })
  afterAll(async () => {
    redis?.thaw()
    await redis?.stop()
  })

  /** Freezes Redis until the connection's probe counts it lost; the caller thaws it. */
  const frozenUntilLost = async (connection: ClusterConnection) => {
    redis.freeze()
    expect(await eventually(() => !connection.up, 5000, 20)).toBe(true)
  }

  it("while starting: a command is sent and answered once Redis wakes up, not refused", async () => {
    const connection = await ClusterConnection.open(redis.url)
    let waking: NodeJS.Timeout | undefined
    try {
      await frozenUntilLost(connection)
      const answer = connection.client.set("starting", "1")
      waking = setTimeout(() => redis.thaw(), 300)
      await expect(answer).resolves.toBe("OK")
    } finally {
      clearTimeout(waking)
      redis.thaw()
      connection.close()
    }
  })

  it("once started: refused at once with RedisAway while Redis does not answer", async () => {
    const connection = await ClusterConnection.open(redis.url)
    try {
      connection.started()
      await frozenUntilLost(connection)
      await expect(connection.client.set("started", "1")).rejects.toBeInstanceOf(RedisAway)
    } finally {
      redis.thaw()
      connection.close()
    }
    // Nothing refused was sent: Redis never ran it.
    const check = await ClusterConnection.open(redis.url)
    try {
      expect(await check.client.get("started")).toBeNull()
    } finally {
      check.close()
    }
  })
})

describe("answeredWithin: an answer in time by the clock", () => {
  it("an answer within the time is in time; one the clock shows late is not, though it came before the timer; a failure or no answer is not", async () => {
    expect(await answeredWithin(Promise.resolve("ok"), 250)).toBe(true)
    // A starved process: the answer's callback runs before the expired timer's, 400 ms after the question.
    const clock = [1_000, 1_400]
    expect(await answeredWithin(Promise.resolve("ok"), 250, () => clock.shift()!)).toBe(false)
    expect(await answeredWithin(Promise.reject(new Error("refused")), 250)).toBe(false)
    expect(await answeredWithin(new Promise(() => undefined), 20)).toBe(false)
  })
})
