/**
 * Asynchronous calls over REST (call_tool and use_tool with `"async": true`, src/runtime/async-calls.ts):
 * answered 202 with a call_id at once, the call run detached through the one pipeline, its status,
 * latest progress and the answer a synchronous call would have given read at /calls/{call_id},
 * cancelled through the pipeline's cancel path, told on /events, recorded once with its outcome,
 * kept within bounds, and visible only to the scope and key that started it. Against a real stdio
 * fixture, over real HTTP.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { join } from "node:path"
import { FAILURE_TEXT } from "../fixtures/fixture-server.js"
import { stdioFixture } from "../fixtures/paths.js"
import { runKeys } from "../../src/cli/keys-command.js"
import { authedApi, eventually, freshDir, openSse, startTestServer, type Api, type Reply, type TestServer } from "../support/index.js"

const fixture = { mcpServers: { fx: { command: stdioFixture("--progress-tool").command, args: [...stdioFixture("--progress-tool").args] } } }

/** Starts an asynchronous call; expects the 202 answer. */
const startAsync = async (client: Api, prefix: string, body: Record<string, unknown>, route = "call_tool"): Promise<string> => {
  const reply = await client.post(`${prefix}/${route}`, { ...body, async: true })
  expect(reply.status, reply.text).toBe(202)
  expect(reply.body.status).toBe("running")
  expect(reply.body.call_id).toMatch(/^call_[A-Za-z0-9_-]{32}$/)
  expect(reply.body.status_url).toBe(`${prefix}/calls/${reply.body.call_id}`)
  return reply.body.call_id as string
}

/** The fixture healthy in the store (from the file) and in each agent named (added). */
const ready = async (client: Api, prefixes: ReadonlyArray<string>): Promise<void> => {
  for (const prefix of prefixes) {
    if (prefix !== "/for_store") {
      const added = await client.post(`${prefix}/add_service?wait=20`, { name: "fx", ...fixture.mcpServers.fx })
      expect(added.status, added.text).toBe(200)
    }
    const waited = await client.post(`${prefix}/wait_service`, { client_id_or_service_name: "fx", status: "healthy", timeout: 20 })
    expect(waited.status, waited.text).toBe(200)
  }
}

/** Polls a call until it is no longer running; its last status answer. */
const settled = async (client: Api, prefix: string, callId: string): Promise<Reply> => {
  let last: Reply | undefined
  const done = await eventually(async () => {
    last = await client.get(`${prefix}/calls/${callId}`)
    return last.status !== 200 || last.body.status !== "running"
  }, 20_000, 50)
  expect(done, last?.text).toBe(true)
  return last!
}

describe("asynchronous calls", () => {
  let server: TestServer

  beforeAll(async () => {
    server = await startTestServer({ services: fixture })
    await ready(server, ["/for_store", "/for_agent/ag1"])
  }, 40_000)
  afterAll(async () => {
    await server?.cleanup()
  }, 15_000)

  it("answers 202 at once; polled, the call completes with the answer a synchronous call gives", async () => {
    const callId = await startAsync(server, "/for_store", { tool_name: "fx__add", args: { a: 2, b: 3 } })
    const ended = await settled(server, "/for_store", callId)
    expect(ended.status).toBe(200)
    expect(ended.body).toMatchObject({ success: true, call_id: callId, status: "completed", tool_name: "fx__add", service_name: "fx", error: null })
    expect(ended.body.ended_at).not.toBeNull()
    const sync = await server.post("/for_store/call_tool", { tool_name: "fx__add", args: { a: 2, b: 3 } })
    expect(ended.body.answer.http_status).toBe(sync.status)
    const { duration_ms: _d1, trace_id: _t1, span_id: _s1, ...kept } = ended.body.answer.body
    const { duration_ms: _d2, trace_id: _t2, span_id: _s2, ...direct } = sync.body
    expect(kept).toEqual(direct)
    expect(ended.body.trace_id).toBe(ended.body.answer.body.trace_id)
  })

  it("through the HttpApi handler too (a request the direct call route leaves to it): 202, and the same end", async () => {
    const reply = await server.post("/for_store/call_tool?via=httpapi", { tool_name: "fx__add", args: { a: 1, b: 1 }, async: true })
    expect(reply.status, reply.text).toBe(202)
    expect(reply.body).toMatchObject({ status: "running", tool_name: "fx__add", status_url: `/for_store/calls/${reply.body.call_id}` })
    const ended = await settled(server, "/for_store", reply.body.call_id)
    expect(ended.body).toMatchObject({ status: "completed", answer: { http_status: 200, body: { result: "2" } } })
  })

  it("use_tool takes async too; a slow call is running while its tool sleeps", async () => {
    const callId = await startAsync(server, "/for_store", { tool_name: "sleep", service_name: "fx", args: { ms: 60_000 } }, "use_tool")
    const now = await server.get(`/for_store/calls/${callId}`)
    expect(now.status).toBe(200)
    expect(now.body).toMatchObject({ status: "running", answer: null, ended_at: null })
    const cancelled = await server.post(`/for_store/calls/${callId}/cancel`)
    expect(cancelled.status, cancelled.text).toBe(200)
    expect(cancelled.body.status).toBe("cancelled")
  })

  it("keeps the latest progress; /events carries the progress with the call_id, its start and its end", async () => {
    const events = await openSse(`${server.url}/events`)
    try {
      const callId = await startAsync(server, "/for_store", { tool_name: "fx__progress", args: { count: 3, every: 20 } })
      const ended = await settled(server, "/for_store", callId)
      expect(ended.body.status).toBe("completed")
      expect(ended.body.progress).toEqual({ progress: 3, total: 3, message: null })
      await events.waitFor((e) => e.event === "progress" && e.json?.call_id === callId, 10_000, "progress with the call_id")
      await events.waitFor((e) => e.event === "async_call" && e.json?.call_id === callId && e.json?.status === "running", 10_000, "the start")
      const end = await events.waitFor((e) => e.event === "async_call" && e.json?.call_id === callId && e.json?.status === "completed", 10_000, "the end")
      expect(end.json).toMatchObject({ scope: "store", agent_id: null, service_name: "fx", http_status: 200 })
    } finally {
      events.close()
    }
  })

  it("cancel ends a running call: the upstream's call ends, one record says cancelled; cancel again answers the same", async () => {
    const callId = await startAsync(server, "/for_agent/ag1", { tool_name: "sleep", args: { ms: 60_000 } })
    const running = await server.get(`/for_agent/ag1/calls/${callId}`)
    expect(running.body.status).toBe("running")
    const cancelled = await server.post(`/for_agent/ag1/calls/${callId}/cancel`)
    expect(cancelled.status, cancelled.text).toBe(200)
    expect(cancelled.body).toMatchObject({ status: "cancelled", answer: null, service_name: "fx" })
    expect(await eventually(() => server.running.store.inFlightCalls === 0, 10_000)).toBe(true)
    const again = await server.post(`/for_agent/ag1/calls/${callId}/cancel`)
    expect(again.body.status).toBe("cancelled")
    const records = await server.get(`/for_agent/ag1/tool_records?outcome=cancelled`)
    expect(records.status, records.text).toBe(200)
    const mine = (records.body.executions as Array<{ trace_id: string }>).filter((r) => r.trace_id === cancelled.body.trace_id)
    expect(mine).toHaveLength(1)
  })

  it("a tool error and an error body are kept with their http_status, as call_tool answers them", async () => {
    const statuses: number[] = []
    const cases: Array<Record<string, unknown>> = [
      { tool_name: "fx__fail" },
      { tool_name: "fx__add", args: { a: "two", b: 3 } },
      { tool_name: "fx__nope" }
    ]
    for (const body of cases) {
      const sync = await server.post("/for_store/call_tool", body)
      statuses.push(sync.status)
      const callId = await startAsync(server, "/for_store", body)
      const ended = await settled(server, "/for_store", callId)
      expect(ended.body.status, JSON.stringify(body)).toBe("failed")
      expect(ended.body.answer.http_status, JSON.stringify(body)).toBe(sync.status)
      if (sync.status === 200) {
        expect(ended.body.answer.body).toMatchObject({ success: false, is_error: true, message: FAILURE_TEXT })
        expect(ended.body.error).toBe(FAILURE_TEXT)
      } else {
        expect(ended.body.answer.body).toEqual(sync.body)
      }
    }
    // A tool error (200), invalid arguments (400), an unknown tool (404).
    expect(statuses).toEqual([200, 400, 404])
  })

  it("goes on when the request that started it is gone", async () => {
    const controller = new AbortController()
    const res = await fetch(`${server.url}/for_store/call_tool`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ tool_name: "fx__sleep", args: { ms: 300 }, async: true }),
      signal: controller.signal
    })
    expect(res.status).toBe(202)
    const { call_id: callId } = (await res.json()) as { call_id: string }
    controller.abort()
    const ended = await settled(server, "/for_store", callId)
    expect(ended.body.status).toBe("completed")
    expect(ended.body.answer.http_status).toBe(200)
  })

  it("bad input: an unknown call_id is 404, a malformed one 400, async not a boolean 400, async with input rounds 400", async () => {
    const unknown = await server.get(`/for_store/calls/call_${"A".repeat(32)}`)
    expect(unknown.status).toBe(404)
    expect(unknown.body.error.code).toBe("NOT_FOUND")
    const unknownCancel = await server.post(`/for_store/calls/call_${"A".repeat(32)}/cancel`)
    expect(unknownCancel.status).toBe(404)
    const malformed = await server.get("/for_store/calls/not-a-call")
    expect(malformed.status).toBe(400)
    expect(malformed.body.error.code).toBe("VALIDATION_ERROR")
    expect(malformed.text).toContain("call_id")
    const notBoolean = await server.post("/for_store/call_tool", { tool_name: "fx__add", args: { a: 1, b: 2 }, async: "yes" })
    expect(notBoolean.status).toBe(400)
    expect(notBoolean.text).toContain("async")
    const rounds = await server.post("/for_store/call_tool", { tool_name: "fx__add", args: { a: 1, b: 2 }, async: true, accept_input_required: true })
    expect(rounds.status).toBe(400)
    expect(rounds.text).toContain("async")
    const agentMalformed = await server.get("/for_agent/ag1/calls/call_short")
    expect(agentMalformed.status).toBe(400)
  })
})

describe("asynchronous calls: who sees them", () => {
  let server: TestServer
  const keys: Record<"one" | "two" | "agentA" | "agentB", string> = { one: "", two: "", agentA: "", agentB: "" }

  const create = async (file: string, ...argv: string[]): Promise<string> => {
    let out = ""
    const code = await runKeys(["create", ...argv, "--keys-file", file], {}, { writeOut: (t) => void (out += t), writeErr: () => undefined })
    expect(code).toBe(0)
    return out.trim()
  }

  beforeAll(async () => {
    const dir = freshDir()
    const file = join(dir, "mcp-store.keys.json")
    keys.one = await create(file, "--role", "admin", "--name", "one")
    keys.two = await create(file, "--role", "admin", "--name", "two")
    keys.agentA = await create(file, "--role", "agent", "--agent", "agent-a", "--name", "a")
    keys.agentB = await create(file, "--role", "agent", "--agent", "agent-b", "--name", "b")
    server = await startTestServer({ dir, services: fixture })
    await ready(authedApi(server.url, keys.one), ["/for_store", "/for_agent/agent-a", "/for_agent/agent-b"])
  }, 40_000)
  afterAll(async () => {
    await server?.cleanup()
  }, 15_000)

  it("only the scope and the key that started a call see it; anyone else gets 404, never 403", async () => {
    const one = authedApi(server.url, keys.one)
    const two = authedApi(server.url, keys.two)
    const agentA = authedApi(server.url, keys.agentA)
    const storeCall = await startAsync(one, "/for_store", { tool_name: "fx__add", args: { a: 1, b: 1 } })
    expect((await settled(one, "/for_store", storeCall)).body.status).toBe("completed")
    // Another admin key: as if it did not exist.
    const other = await two.get(`/for_store/calls/${storeCall}`)
    expect(other.status).toBe(404)
    expect(other.body.error.code).toBe("NOT_FOUND")
    expect((await two.post(`/for_store/calls/${storeCall}/cancel`)).status).toBe(404)
    // The same key in another scope.
    expect((await one.get(`/for_agent/agent-a/calls/${storeCall}`)).status).toBe(404)

    const agentCall = await startAsync(agentA, "/for_agent/agent-a", { tool_name: "fx__sleep", args: { ms: 60_000 } })
    expect((await agentA.get(`/for_agent/agent-a/calls/${agentCall}`)).body.status).toBe("running")
    // An admin key that did not start it, and the store's scope, see nothing.
    expect((await one.get(`/for_agent/agent-a/calls/${agentCall}`)).status).toBe(404)
    expect((await one.get(`/for_store/calls/${agentCall}`)).status).toBe(404)
    expect((await one.post(`/for_agent/agent-a/calls/${agentCall}/cancel`)).status).toBe(404)
    expect((await agentA.get(`/for_agent/agent-a/calls/${agentCall}`)).body.status).toBe("running")
    // Another agent's key is refused its agent's path by the route's access, whatever the id (no existence told).
    const agentB = authedApi(server.url, keys.agentB)
    const refused = await agentB.get(`/for_agent/agent-a/calls/${agentCall}`)
    const refusedUnknown = await agentB.get(`/for_agent/agent-a/calls/call_${"B".repeat(32)}`)
    expect(refused.status).toBe(refusedUnknown.status)
    expect(refused.body.error.code).toBe(refusedUnknown.body.error.code)
    expect((await agentB.get(`/for_agent/agent-b/calls/${agentCall}`)).status).toBe(404)
    const cancelled = await agentA.post(`/for_agent/agent-a/calls/${agentCall}/cancel`)
    expect(cancelled.body.status).toBe("cancelled")
  })
})

describe("asynchronous calls: bounds", () => {
  let server: TestServer

  beforeAll(async () => {
    server = await startTestServer({ services: fixture, options: { max_async_results: 2, max_async_calls: 1 } })
    await ready(server, ["/for_store"])
  }, 40_000)
  afterAll(async () => {
    await server?.cleanup()
  }, 15_000)

  it("keeps the newest finished calls up to the cap, drops the oldest; refuses a call beyond the running cap with 429", async () => {
    const ids: string[] = []
    for (const a of [1, 2, 3]) {
      const callId = await startAsync(server, "/for_store", { tool_name: "fx__add", args: { a, b: 0 } })
      expect((await settled(server, "/for_store", callId)).body.status).toBe("completed")
      ids.push(callId)
    }
    expect((await server.get(`/for_store/calls/${ids[0]}`)).status).toBe(404)
    for (const kept of ids.slice(1)) expect((await server.get(`/for_store/calls/${kept}`)).body.answer.body.result).toBeDefined()
    expect((await server.get(`/for_store/calls/${ids[2]}`)).body.answer.body.result).toBe("3")

    const slow = await startAsync(server, "/for_store", { tool_name: "fx__sleep", args: { ms: 60_000 } })
    const refused = await server.post("/for_store/call_tool", { tool_name: "fx__add", args: { a: 1, b: 1 }, async: true })
    expect(refused.status).toBe(429)
    expect(refused.body.error).toMatchObject({ code: "TOO_MANY", details: { limit: "max_async_calls", max: 1 } })
    expect(refused.headers.get("retry-after")).toBe("1")
    expect((await server.post(`/for_store/calls/${slow}/cancel`)).body.status).toBe("cancelled")
  })
})
