/**
 * Upstream tasks (the tasks extension, 2026-07-28) in replica mode: three replicas in this process on
 * one real Redis, the era HTTP fixture's task tools (`job`, `forever`) run by one of them (B).
 * - A modern client that declared the extension calls through A (the call forwarded to B with
 *   keepTask) and gets a `t1.` task; any replica opens the id (they share the secret): tasks/get,
 *   tasks/update and tasks/cancel through A or C are relayed to B, then to the upstream.
 * - REST and a modern client without the extension, through A or C, get the final result (B follows the task).
 * - The call is recorded by the replica that took it (A), once, when an answer relayed by any replica
 *   shows its end (C tells A, whose id the task's id names); a task A still follows when it stops is
 *   recorded then, `interrupted`.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startEraHttpFixture, type EraHttpFixture } from "../fixtures/era-http.js"
import { eventually, hasRedisServer, modernRequest, useReplicaCluster, waitStatus, withTasks, type TestServer } from "../support/index.js"

const CLUSTER = "tasks"

interface Answer {
  readonly status: number
  readonly message: { result?: Record<string, any>; error?: { code: number; message: string; data?: unknown } }
}

/** One modern request to a replica's `/mcp` (raw HTTP), the extension declared unless `tasks` is false: its status and JSON-RPC answer. */
const modern = async (replica: TestServer, method: string, params: Record<string, unknown>, options: { tasks?: boolean } = {}): Promise<Answer> => {
  const answer = await modernRequest(replica.url + "/mcp", method, params, { capabilities: options.tasks === false ? {} : withTasks })
  return { status: answer.status, message: answer.response }
}

/** tasks/get through `replica` until `until` holds (or 10 s pass): the last task seen. */
const pollUntil = async (replica: TestServer, taskId: string, until: (task: Record<string, any>) => boolean): Promise<Record<string, any>> => {
  const deadline = Date.now() + 10_000
  for (;;) {
    const got = await modern(replica, "tasks/get", { taskId })
    expect(got.message.error, JSON.stringify(got.message)).toBeUndefined()
    const task = got.message.result!
    if (until(task) || Date.now() > deadline) return task
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

interface Execution {
  readonly tool_name: string
  readonly outcome: string
  readonly error: string | null
  readonly result: unknown
  readonly params: Record<string, unknown>
}

describe.skipIf(!hasRedisServer)("upstream tasks across replicas", { timeout: 30_000 }, () => {
  const cluster = useReplicaCluster()
  let era: EraHttpFixture
  beforeAll(async () => {
    era = await startEraHttpFixture()
  })
  afterAll(async () => {
    await era?.stop()
  })

  /** The file's three replicas, `svc` healthy on each, started once: A and C do not run it, B does. */
  let started: Promise<{ readonly a: TestServer; readonly b: TestServer; readonly c: TestServer }> | undefined
  const replicas = () =>
    (started ??= (async () => {
      // The first seeds the cluster with its services file; the other two join it at once.
      const first = await cluster.replica(CLUSTER, { mcpServers: { svc: { url: era.url } } })
      const all = [first, ...(await Promise.all([cluster.replica(CLUSTER), cluster.replica(CLUSTER)]))]
      await Promise.all(all.map((r) => waitStatus(r, "/for_store", "svc", "healthy", 15)))
      const b = all.find((r) => r.running.cluster?.owns("store/svc") === true)
      expect(b).toBeDefined()
      const [a, c] = all.filter((r) => r !== b) as [TestServer, TestServer]
      return { a, b: b!, c }
    })())

  /** The task of the job asked for input (followed through C): read again after A stops. */
  let asked = ""

  /** The records of `tool` (every replica reads the cluster's) whose arguments had `steps`. */
  const recordsOf = async (replica: TestServer, tool: string, steps?: number): Promise<Execution[]> =>
    ((await replica.get(`/for_store/tool_records?tool_name=${tool}&limit=200`)).body.executions as Execution[]).filter((r) => steps === undefined || r.params["steps"] === steps)

  it("a call through a replica that does not run the service hands a task; tasks/get through it and through a third relays the upstream's state; recorded once, where the call was taken, when its end is seen anywhere", async () => {
    const { a, b, c } = await replicas()
    // Long enough (1.2 s) that the first reads below see it working, even on a busy machine.
    const started = await modern(a, "tools/call", { name: "svc__job", arguments: { steps: 3, step_ms: 400, poll_ms: 20 } })
    expect(started.status).toBe(200)
    const handle = started.message.result!
    expect(handle).toMatchObject({ resultType: "task", status: "working", ttlMs: 60_000, pollIntervalMs: 20 })
    const taskId = String(handle["taskId"])
    expect(taskId).toMatch(/^t1\./)
    // A and C answer the same task (A: its own id; C: it opens it, the cluster shares the secret).
    expect((await modern(a, "tasks/get", { taskId })).message.result).toMatchObject({ taskId, resultType: "complete", status: "working" })
    expect((await modern(c, "tasks/get", { taskId })).message.result).toMatchObject({ taskId, resultType: "complete", status: "working" })
    // Followed to its end through C: C relays it (to B, then the upstream) and tells A, which records the call once.
    const ended = await pollUntil(c, taskId, (t) => t["status"] === "completed")
    expect(ended).toMatchObject({ taskId, status: "completed", result: { structuredContent: { steps: 3 }, content: [{ type: "text", text: "job done: 3 steps" }] } })
    expect(await eventually(async () => (await recordsOf(b, "job", 3)).length === 1, 5000)).toBe(true)
    // Seen ended again, through A and C: nothing more.
    expect((await modern(a, "tasks/get", { taskId })).message.result).toMatchObject({ status: "completed" })
    await modern(a, "tasks/get", { taskId })
    await modern(c, "tasks/get", { taskId })
    await new Promise((resolve) => setTimeout(resolve, 200))
    for (const r of [a, b, c]) expect(await recordsOf(r, "job", 3)).toEqual([expect.objectContaining({ outcome: "success", result: { steps: 3 } })])
    // The upstream was asked under its own id, whichever replica the client asked.
    expect(era.requests().filter((r) => r === "POST tasks/get").length).toBeGreaterThanOrEqual(4)
    expect(era.headers().filter((h) => h.method === "tasks/get").every((h) => /^[0-9a-f-]{36}$/.test(h.name ?? ""))).toBe(true)
  })

  it("tasks/update and tasks/cancel through another replica than the one that took the call", async () => {
    const { a, c } = await replicas()
    const asking = (await modern(a, "tools/call", { name: "svc__job", arguments: { steps: 4, step_ms: 20, poll_ms: 10, ask: true } })).message.result!
    expect(asking["taskId"]).toMatch(/^t1\./)
    asked = String(asking["taskId"])
    const waiting = await pollUntil(c, asking["taskId"], (t) => t["status"] === "input_required")
    expect(waiting["inputRequests"]).toEqual({ "confirm-1": expect.objectContaining({ method: "elicitation/create" }) })
    const updated = await modern(c, "tasks/update", { taskId: asking["taskId"], inputResponses: { "confirm-1": { action: "accept", content: { ok: true } } } })
    expect(updated.message.result).toMatchObject({ resultType: "complete" })
    expect(await pollUntil(c, asking["taskId"], (t) => t["status"] === "completed")).toMatchObject({ result: { structuredContent: { steps: 4 } } })
    expect(era.requests()).toContain("POST tasks/update")

    const forever = (await modern(a, "tools/call", { name: "svc__forever", arguments: {} })).message.result!
    expect(forever).toMatchObject({ resultType: "task", status: "working" })
    expect((await modern(c, "tasks/cancel", { taskId: forever["taskId"] })).message.result).toMatchObject({ resultType: "complete" })
    expect(await pollUntil(c, forever["taskId"], (t) => t["status"] === "cancelled")).toMatchObject({ status: "cancelled" })
    expect(await eventually(() => era.notes().some((n) => n.startsWith("cancelled task ")), 3000)).toBe(true)
  })

  it("REST and a modern client without the extension, through a replica that does not run the service, get the result: the owner follows the task", async () => {
    const { a, b, c } = await replicas()
    const gets = () => era.requests().filter((r) => r === "POST tasks/get").length
    const before = gets()
    const rest = await a.post("/for_store/call_tool", { tool_name: "svc__job", args: { steps: 5, step_ms: 30, poll_ms: 10 } })
    expect(rest.status, rest.text).toBe(200)
    expect(rest.body).toMatchObject({ is_error: false, structured_content: { steps: 5 }, service_name: "svc" })
    expect(JSON.stringify(rest.body)).not.toMatch(/resultType|taskId/)
    expect(gets()).toBeGreaterThan(before)

    const plain = await modern(c, "tools/call", { name: "svc__job", arguments: { steps: 6, step_ms: 20, poll_ms: 10 } }, { tasks: false })
    expect(plain.message.result).toMatchObject({ resultType: "complete", structuredContent: { steps: 6 } })
    // Each recorded once, as it ended, by the replica that took it.
    for (const steps of [5, 6]) expect(await eventually(async () => (await recordsOf(b, "job", steps)).length === 1, 5000)).toBe(true)
    expect((await recordsOf(b, "job", 5))[0]).toMatchObject({ outcome: "success", result: { steps: 5 } })
  })

  it("the ends seen through another replica are recorded by the one that took the calls, with their outcomes; a task it still follows at its stop: interrupted, once", async () => {
    const { a, b, c } = await replicas()
    // The job asked through C (steps 4) completed, and `forever` was cancelled, both seen through C only.
    expect(await eventually(async () => (await recordsOf(b, "job", 4)).length === 1 && (await recordsOf(b, "forever")).length === 1, 5000)).toBe(true)
    expect((await recordsOf(b, "job", 4))[0]).toMatchObject({ outcome: "success", result: { steps: 4 } })
    expect((await recordsOf(b, "forever"))[0]).toMatchObject({ outcome: "cancelled" })
    // A task A handed out and nobody saw end: recorded at A's stop.
    const left = (await modern(a, "tools/call", { name: "svc__job", arguments: { steps: 50, step_ms: 1000, poll_ms: 50 } })).message.result!
    expect(left).toMatchObject({ resultType: "task" })
    await a.close()
    for (const r of [b, c]) {
      expect(await eventually(async () => (await recordsOf(r, "job", 50)).length === 1, 5000)).toBe(true)
      expect((await recordsOf(r, "job", 50))[0]).toMatchObject({ outcome: "interrupted", error: "the store stopped before the task's end was seen", result: null })
    }
    // Nothing more recorded of the others at the stop.
    expect(await recordsOf(b, "job", 4)).toHaveLength(1)
    expect(await recordsOf(b, "forever")).toHaveLength(1)
    // Still answered through C after A stopped: the id is the cluster's, the task the upstream's.
    expect((await modern(c, "tasks/get", { taskId: asked })).message.result).toMatchObject({ taskId: asked, status: "completed" })
  })
})
