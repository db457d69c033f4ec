/**
 * Replica mode with a hung Redis (docs/replicas.md, "Failure modes"): the redis-server process is
 * frozen with SIGSTOP, so its connections stay open and nothing answers, which a closed connection
 * does not show. Two replicas: calls and reads are answered from what each knows, changes answer
 * 503 `cluster_unavailable` (a client-side time-out of a few seconds turns a hang into a failure);
 * after SIGCONT a refused change never lands (Redis runs the commits it had queued, and refuses
 * them: past their deadline), and the records of the calls made while frozen are written. Calls
 * never wait on the frozen Redis (docs/replicas.md, "A call while Redis hangs"): a recorded call of a
 * service the replica runs and a forwarded one, from the freeze on, each answer within half a
 * command's time-out; with the owner gone meanwhile, a call through the other replica is refused at
 * once instead of being sent again until its time-out.
 */
import { setTimeout as delay } from "node:timers/promises"
import { describe, expect, it } from "vitest"
import { COMMAND_TIMEOUT_MS } from "../../src/redis/connection.js"
import { clusterKey } from "../../src/redis/key-names.js"
import { eventually, hasRedisServer, useReplicaCluster, within, type TestServer } from "../support/index.js"

const CLUSTER = "hung"

/** A client-side bound: an answer slower than this is a hang, and fails the test. */
const ANSWER_MS = 5000

const names = async (server: TestServer): Promise<string[]> => {
  const reply = await within(server.get("/for_store/list_services"), ANSWER_MS, "list_services")
  expect(reply.status).toBe(200)
  return (reply.body.services as Array<{ name: string }>).map((s) => s.name).sort()
}

describe.skipIf(!hasRedisServer)("replica mode: a hung Redis (SIGSTOP)", { timeout: 90_000 }, () => {
  const cluster = useReplicaCluster()
  const replica = (services?: unknown) => cluster.replica(CLUSTER, services, { lease_ms: 10000 })

  it("answers calls and reads while frozen, refuses changes with 503 that never land after SIGCONT, and writes the frozen calls' records", async () => {
    const a = await replica({ mcpServers: { kit: { url: cluster.upstream.url } } })
    const b = await replica()
    for (const r of [a, b]) {
      const waited = await r.post("/for_store/wait_service", { client_id_or_service_name: "kit", status: "healthy", timeout: 15 })
      expect(waited.body.data?.final_status).toBe("healthy")
    }

    cluster.redis.freeze()
    try {
      // At once: the commit is sent before any probe could notice the hang, and Redis has it queued.
      const first = await within(a.post("/for_store/add_service", { name: "queued", url: cluster.upstream.url, disabled: true }), ANSWER_MS, "a change just after the freeze")
      expect(first.status).toBe(503)
      expect(first.body.error.details.reason).toBe("cluster_unavailable")

      for (const r of [a, b]) {
        const called = await within(r.post("/for_store/call_tool", { tool_name: "kit__echo", args: { text: `frozen ${r.url}` } }), ANSWER_MS, "a call while frozen")
        expect(called.status).toBe(200)
        expect(called.body.result).toBe(`frozen ${r.url}`)
        expect(await names(r)).toEqual(["kit"])
        const status = await within(r.get("/for_store/service_status/kit"), ANSWER_MS, "service_status while frozen")
        expect(status.body.status).toBe("healthy")
      }

      // Once the replica knows Redis does not answer: refused without being sent.
      const second = await within(b.post("/for_store/add_service", { name: "refused", url: cluster.upstream.url, disabled: true }), ANSWER_MS, "a change while frozen")
      expect(second.status).toBe(503)
      expect(second.body.error.details.reason).toBe("cluster_unavailable")
      const deleted = await within(a.del("/for_store/delete_service/kit"), ANSWER_MS, "a delete while frozen")
      expect(deleted.status).toBe(503)
    } finally {
      cluster.redis.thaw()
    }

    // Changes are taken again; one made now comes after whatever Redis ran of its queue.
    const accepted = await eventually(async () => (await b.post("/for_store/add_service", { name: "after", url: cluster.upstream.url, disabled: true })).status === 200, 10_000, 100)
    expect(accepted).toBe(true)
    for (const r of [a, b]) {
      const listed = await eventually(async () => JSON.stringify(await names(r)) === JSON.stringify(["after", "kit"]), 5000, 50)
      expect(listed ? ["after", "kit"] : await names(r)).toEqual(["after", "kit"])
    }
    const client = await cluster.redis.connect()
    expect(Object.keys(await client.hGetAll(clusterKey(CLUSTER, "defs"))).sort()).toEqual(["store/after", "store/kit"])

    // The records of the calls made while frozen reach the stream, and every replica.
    const expected = [`frozen ${a.url}`, `frozen ${b.url}`]
    const texts = async (r: TestServer): Promise<string[]> =>
      ((await r.get("/for_store/tool_records?limit=50")).body.executions as Array<{ params: { text?: string } }>).flatMap((e) => (e.params.text === undefined ? [] : [e.params.text]))
    for (const r of [a, b]) {
      const seen = await eventually(async () => {
        const all = await texts(r)
        return expected.every((t) => all.includes(t))
      }, 10_000, 100)
      expect(seen ? expected : await texts(r)).toEqual(expected)
    }
    const stream = await client.xRange(clusterKey(CLUSTER, "records"), "-", "+")
    expect((stream ?? []).filter((e) => expected.some((t) => (e.message["r"] ?? "").includes(t)))).toHaveLength(2)
  })
})

/**
 * How long Redis stays frozen while calls are made: past the probe's verdict (about 1 s) and past
 * every lease's deadline (the lease time, 3 s, less its margin), so a call that waited on Redis, or
 * on an owner that gave its lease up, shows.
 */
const FROZEN_MS = 4000

describe.skipIf(!hasRedisServer)("replica mode: calls never wait on a frozen Redis", { timeout: 90_000 }, () => {
  const cluster = useReplicaCluster()

  /** Two replicas of cluster `name` with `kit` healthy on both: the one that runs it, and the other. */
  const twoReplicas = async (name: string): Promise<{ readonly owner: TestServer; readonly mirror: TestServer }> => {
    const a = await cluster.replica(name, { mcpServers: { kit: { url: cluster.upstream.url } } }, { lease_ms: 10000 })
    const b = await cluster.replica(name, undefined, { lease_ms: 10000 })
    for (const r of [a, b]) {
      const waited = await r.post("/for_store/wait_service", { client_id_or_service_name: "kit", status: "healthy", timeout: 15 })
      expect(waited.body.data?.final_status).toBe("healthy")
    }
    return a.running.cluster?.owns("store/kit") === true ? { owner: a, mirror: b } : { owner: b, mirror: a }
  }

  it("a call of a service this replica runs (recorded) and one forwarded to its owner answer within half a command's time-out, from the freeze on; their records are written after SIGCONT", async () => {
    const { owner, mirror } = await twoReplicas("calls")
    const call = (r: TestServer, text: string) => r.post("/for_store/call_tool", { tool_name: "kit__echo", args: { text } })
    for (const r of [owner, mirror]) expect((await call(r, "before the freeze")).status).toBe(200)

    // A bound on a hang, not a speed measure: a call that waits on a Redis command meets its time-out.
    const bound = COMMAND_TIMEOUT_MS / 2
    const made: string[] = []
    cluster.redis.freeze()
    try {
      const until = Date.now() + FROZEN_MS
      for (let i = 0; Date.now() < until; i++) {
        for (const [kind, r] of [["local", owner], ["forwarded", mirror]] as const) {
          const text = `frozen ${kind} ${i}`
          const reply = await within(call(r, text), bound, `a ${kind} call while frozen (${i})`)
          expect(reply.status, reply.text).toBe(200)
          expect(reply.body.result).toBe(text)
          made.push(text)
        }
        // Rounds spread over the whole time frozen (a call every 100 ms or so, from the first at
        // once): how many are made does not matter, only that some come past each deadline above.
        await delay(100)
      }
    } finally {
      cluster.redis.thaw()
    }

    // Every call made while frozen is recorded once, by the replica that took it, once Redis answers.
    const client = await cluster.redis.connect()
    const frozenTexts = async (): Promise<string[]> =>
      ((await client.xRange(clusterKey("calls", "records"), "-", "+")) ?? []).flatMap((e) => {
        const text = (JSON.parse(e.message["r"] ?? "{}") as { params?: { text?: string } }).params?.text
        return text?.startsWith("frozen ") === true ? [text] : []
      })
    const written = await eventually(async () => (await frozenTexts()).length >= made.length, 10_000, 100)
    expect(written ? (await frozenTexts()).sort() : await frozenTexts()).toEqual([...made].sort())
  })

  it("the owner gone while Redis is frozen: a call through the other replica is refused at once, not sent again until its time-out (no replica can take the service over)", async () => {
    const { owner, mirror } = await twoReplicas("gone")
    cluster.redis.freeze()
    try {
      // Once the mirror knows Redis does not answer (its probe's verdict), the owner stops: its lease stays in Redis.
      expect(await eventually(() => mirror.running.cluster?.connection.up === false, 10_000, 25)).toBe(true)
      await within(owner.close(), 30_000, "the owner's stop while Redis is frozen")
      const reply = await within(mirror.post("/for_store/call_tool", { tool_name: "kit__echo", args: { text: "nobody runs it" }, timeout: 30 }), COMMAND_TIMEOUT_MS / 2, "a call whose owner is gone")
      // The cluster cannot bring it to a replica that runs the service: unavailable for now, not the upstream's failure.
      expect(reply.status, reply.text).toBe(503)
      expect(reply.body.error.code).toBe("SERVICE_UNAVAILABLE")
      expect(reply.body.error.details).toMatchObject({ reason: "cluster_unavailable", retry_after_seconds: 1 })
      expect(reply.headers.get("retry-after")).toBe("1")
      expect(reply.body.message).toContain("Redis does not answer")
    } finally {
      cluster.redis.thaw()
    }
  })
})
