/**
 * Replica mode with a hung Redis (docs/replicas.md, "Failure modes"): the redis-server process is
 * frozen with SIGSTOP, so its connections stay open and nothing answers, which a closed connection
 * does not show. Two replicas: calls and reads are answered from what each knows, changes answer
 * 503 `cluster_unavailable` (a client-side time-out of a few seconds turns a hang into a failure);
 * after SIGCONT a refused change never lands (Redis runs the commits it had queued, and refuses
 * them: past their deadline), and the records of the calls made while frozen are written.
 */
import { describe, expect, it } from "vitest"
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
  const replica = (services?: unknown) => cluster.replica(CLUSTER, services, { lease_ms: 3000 })

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
