// Tasks of a `per_user` service (README, Per-user credentials; Tasks): an upstream that keeps tasks
// per connection or per user knows a task only on the connection of the principal that made its
// call. One store, the era fixture's task tools over Streamable HTTP as a `per_user` (Authorization
// header) service of an agent, two keys with their own credential: each one's 2026-07-28 client
// follows its task through the store (tasks/get relayed, and tasks/cancel), each one's asynchronous
// REST call is followed by the store (again after a restart of the store), a task request while the
// service reconnects waits for it as a call does, and the upstream sees
// every task request of a principal with that principal's own credential, never the shared
// connection's (none). A task asked after its caller deleted its credential, or by a library caller
// (no principal), is refused CREDENTIALS_REQUIRED, and reaches nothing upstream.
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Cause, Exit, Option } from "effect"
import { sessionOwner } from "../../src/http/gateway/session-seal.js"
import { statusOf } from "../../src/machines/service.js"
import { relayTaskRequest } from "../../src/runtime/calls.js"
import { startEraHttpFixture, type EraHttpFixture } from "../fixtures/era-http.js"
import { authedApi, eventually, modernRequest, startPerUserStore, startTestServer, withTasks, type Api, type Reply, type TestServer } from "../support/index.js"

const AGENT = "crew"
const PREFIX = `/for_agent/${AGENT}`
const MCP = `${PREFIX}/mcp`

describe("tasks of a per_user service go through the caller's own connection", { timeout: 20_000 }, () => {
  let era: EraHttpFixture
  let server: TestServer
  const keys = { admin: "", alice: "", bob: "" }
  let alice: Api
  let bob: Api

  beforeAll(async () => {
    era = await startEraHttpFixture()
    const store = await startPerUserStore({ url: era.url, agent: AGENT, service: "jobs", principals: ["alice", "bob"] })
    server = store.server
    Object.assign(keys, store.keys)
    alice = store.as("alice")
    bob = store.as("bob")
  }, 30_000)

  afterAll(async () => {
    await server?.cleanup()
    await era?.stop()
  }, 15_000)

  /** One 2026-07-28 request to the agent's /mcp with `key`, the tasks extension declared: its JSON-RPC answer. */
  const modern = async (key: string, method: string, params: Record<string, unknown>) => (await modernRequest(server.url + MCP, method, params, { key, capabilities: withTasks })).response!

  /** The upstream's task requests of `method` so far (their upstream task id and Authorization header). */
  const upstreamTasks = (method: string) => era.headers().filter((h) => h.method === method)
  /**
   * Task requests upstream other than Bob's, on a principal's connection or the shared one: the store
   * may still be polling a task of Bob's that an asynchronous call follows (below), at any moment.
   */
  const notBobs = () => ["tasks/get", "tasks/cancel"].flatMap(upstreamTasks).filter((h) => h.authorization !== "Bearer bob-own").length

  /** Starts a `job` task for `key` and follows it with tasks/get to its end: the upstream task id it had. */
  const followed = async (key: string): Promise<string> => {
    const started = await modern(key, "tools/call", { name: "jobs__job", arguments: { steps: 2, step_ms: 30, poll_ms: 10 } })
    expect(started.result, JSON.stringify(started)).toMatchObject({ resultType: "task", status: "working" })
    const taskId = started.result["taskId"] as string
    let last: Record<string, any> | undefined
    const ended = await eventually(async () => {
      const got = await modern(key, "tasks/get", { taskId })
      expect(got.error, JSON.stringify(got)).toBeUndefined()
      last = got.result
      return last!["status"] !== "working"
    }, 5000, 20)
    expect(ended).toBe(true)
    expect(last).toMatchObject({ status: "completed", taskId, result: { structuredContent: { steps: 2 } } })
    // The upstream's own id: the one of the task requests relayed for this store task (one followed at a time).
    const relayed = upstreamTasks("tasks/get").at(-1)
    expect(relayed?.name).toMatch(/^[0-9a-f-]{36}$/)
    return relayed!.name!
  }

  it("each principal's tasks/get reaches the upstream with its own credential, as its call did", async () => {
    const a = await followed(keys.alice)
    const b = await followed(keys.bob)
    expect(a).not.toBe(b)
    const gets = upstreamTasks("tasks/get")
    const aliceGets = gets.filter((h) => h.name === a)
    const bobGets = gets.filter((h) => h.name === b)
    expect(aliceGets.length).toBeGreaterThan(0)
    expect(bobGets.length).toBeGreaterThan(0)
    expect(aliceGets.every((h) => h.authorization === "Bearer alice-own")).toBe(true)
    expect(bobGets.every((h) => h.authorization === "Bearer bob-own")).toBe(true)
    // The calls that started them went the same way.
    const calls = era.headers().filter((h) => h.method === "tools/call" && h.name === "job")
    expect(calls.map((h) => h.authorization).sort()).toEqual(["Bearer alice-own", "Bearer bob-own"])
  })

  it("tasks/cancel goes through the caller's own connection too", async () => {
    const started = await modern(keys.bob, "tools/call", { name: "jobs__forever", arguments: {} })
    expect(started.result, JSON.stringify(started)).toMatchObject({ resultType: "task", status: "working" })
    const cancelled = await modern(keys.bob, "tasks/cancel", { taskId: started.result["taskId"] })
    expect(cancelled.error, JSON.stringify(cancelled)).toBeUndefined()
    const cancels = upstreamTasks("tasks/cancel")
    expect(cancels.length).toBe(1)
    expect(cancels[0]?.authorization).toBe("Bearer bob-own")
    const got = await modern(keys.bob, "tasks/get", { taskId: started.result["taskId"] })
    expect(got.result).toMatchObject({ status: "cancelled" })
  })

  it("an asynchronous REST call's task is followed by the store on the caller's own connection", async () => {
    const before = upstreamTasks("tasks/get").length
    const reply = await alice.post(`${PREFIX}/call_tool`, { tool_name: "jobs__job", args: { steps: 2, step_ms: 30, poll_ms: 10 }, async: true })
    expect(reply.status, reply.text).toBe(202)
    let last: Reply | undefined
    const done = await eventually(async () => {
      last = await alice.get(`${PREFIX}/calls/${reply.body.call_id}`)
      return last.status !== 200 || last.body.status !== "running"
    }, 5000, 20)
    expect(done, last?.text).toBe(true)
    expect(last!.body).toMatchObject({ status: "completed" })
    const polls = upstreamTasks("tasks/get").slice(before)
    expect(polls.length).toBeGreaterThan(0)
    expect(polls.every((h) => h.authorization === "Bearer alice-own")).toBe(true)
  })

  it("an asynchronous call's task followed again after a restart of the store is followed on its caller's own connection", async () => {
    const reply = await bob.post(`${PREFIX}/call_tool`, { tool_name: "jobs__job", args: { steps: 8, step_ms: 100, poll_ms: 20 }, async: true })
    expect(reply.status, reply.text).toBe(202)
    const callId = reply.body.call_id as string
    // The call keeps its upstream task (in the file of asynchronous calls beside the services file) before the stop.
    const kept = () => {
      try {
        return (JSON.parse(readFileSync(join(server.dir, "mcp.async-calls.json"), "utf8")) as { calls: Array<{ call_id: string; upstream_task?: string }> }).calls.find((c) => c.call_id === callId)?.upstream_task
      } catch {
        return undefined
      }
    }
    expect(await eventually(() => kept() !== undefined, 5000, 20)).toBe(true)
    await server.close()
    const before = upstreamTasks("tasks/get").length
    server = await startTestServer({ dir: server.dir })
    alice = authedApi(server.url, keys.alice)
    bob = authedApi(server.url, keys.bob)
    let last: Reply | undefined
    const done = await eventually(async () => {
      last = await bob.get(`${PREFIX}/calls/${callId}`)
      return last.status === 200 && last.body.status !== "running"
    }, 8000, 50)
    expect(done, last?.text).toBe(true)
    expect(last!.body).toMatchObject({ status: "completed", answer: { body: { structured_content: { steps: 8 } } } })
    // Followed again by the new store, on bob's own connection (his credential kept encrypted beside the services file).
    const polls = upstreamTasks("tasks/get").slice(before)
    expect(polls.length).toBeGreaterThan(0)
    expect(polls.every((h) => h.name === kept() && h.authorization === "Bearer bob-own")).toBe(true)
  })

  it("a task request while the service reconnects waits for it, as a call does, instead of being refused as 'initializing'", async () => {
    const started = await modern(keys.bob, "tools/call", { name: "jobs__forever", arguments: {} })
    expect(started.result, JSON.stringify(started)).toMatchObject({ resultType: "task", status: "working" })
    expect((await modern(keys.bob, "tasks/get", { taskId: started.result["taskId"] })).result).toMatchObject({ status: "working" })
    const upstreamId = upstreamTasks("tasks/get").at(-1)!.name!
    const effects = server.running.store.forAgent(AGENT).effects
    const actor = effects.findService("jobs")!
    actor.send({ type: "RESTART" })
    expect(statusOf(actor.getSnapshot())).toBe("initializing")
    const bobs = sessionOwner({ role: "agent", agentId: AGENT }, `Bearer ${keys.bob}`)
    const exit = await relayTaskRequest(effects, "jobs", "tasks/get", { taskId: upstreamId }, new AbortController().signal, undefined, bobs)
    expect(Exit.isSuccess(exit) ? exit.value : Cause.pretty(exit.cause)).toMatchObject({ status: "working" })
    expect(statusOf(actor.getSnapshot())).toBe("healthy")
    expect(upstreamTasks("tasks/get").at(-1)).toMatchObject({ name: upstreamId, authorization: "Bearer bob-own" })
    expect((await modern(keys.bob, "tasks/cancel", { taskId: started.result["taskId"] })).error).toBeUndefined()
  })

  it("a library caller (no principal) is refused CREDENTIALS_REQUIRED, never sent on the shared connection", async () => {
    const before = notBobs()
    const exit = await relayTaskRequest(server.running.store.forAgent(AGENT).effects, "jobs", "tasks/get", { taskId: "00000000-0000-0000-0000-000000000000" }, new AbortController().signal)
    expect(Exit.isFailure(exit)).toBe(true)
    const failure = Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : Option.none()
    expect(Option.getOrUndefined(failure)).toMatchObject({ _tag: "CredentialsRequired", serviceName: "jobs", route: `PUT ${PREFIX}/credentials/jobs` })
    expect(notBobs()).toBe(before)
  })

  it("a task asked after its caller deleted its credential is refused CREDENTIALS_REQUIRED; nothing reaches the upstream", async () => {
    const started = await modern(keys.alice, "tools/call", { name: "jobs__forever", arguments: {} })
    expect(started.result, JSON.stringify(started)).toMatchObject({ resultType: "task" })
    const deleted = await alice.del(`${PREFIX}/credentials/jobs`)
    expect(deleted.status, deleted.text).toBe(200)
    const before = notBobs()
    for (const method of ["tasks/get", "tasks/cancel"]) {
      const refused = await modern(keys.alice, method, { taskId: started.result["taskId"] })
      expect(refused.error, JSON.stringify(refused)).toMatchObject({ code: -32600, data: { code: "CREDENTIALS_REQUIRED", service_name: "jobs", route: `PUT ${PREFIX}/credentials/jobs` } })
    }
    expect(notBobs()).toBe(before)
    // Bob's own credential is untouched: his tasks still reach the upstream as him.
    const b = await followed(keys.bob)
    expect(upstreamTasks("tasks/get").filter((h) => h.name === b).every((h) => h.authorization === "Bearer bob-own")).toBe(true)
  })
})
