// Upstream tasks (the tasks extension of 2026-07-28) through the store, against the era fixtures'
// task tools (test/fixtures/era-tasks.ts) over Streamable HTTP and stdio. A caller that cannot take
// a task (REST, a 2025 MCP client, a modern client that did not declare the extension) gets the
// call's result: the store polls the task to its end, each step a progress, its input asked through
// the caller, its failure an upstream error, a time-out cancelling it upstream. A modern client that
// declared the extension gets a task of the store's (`t1.` sealed id) and follows it through the
// store: tasks/get, tasks/update, tasks/cancel relayed to the upstream under its own id; the call is
// one record, written when its end is seen. The id is bound to its key and scope (another key,
// another scope, a changed byte: "not found"), and the wire rules hold (Mcp-Name is the task id,
// -32020; a client without the extension, -32021). A store restarted on the same services file (its
// key file) still opens the ids it handed out; the calls it followed were recorded interrupted at the stop.
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { runKeys } from "../../src/cli/keys-command.js"
import type { ProgressEvent } from "../../src/runtime/progress.js"
import { startEraHttpFixture, type EraHttpFixture } from "../fixtures/era-http.js"
import { eraStdio } from "../fixtures/paths.js"
import { addService, authedApi, eventually, freshDir, localService, modernRequest, startTestServer, TASKS_EXTENSION as TASKS, waitStatus, withTasks, within, type TestServer } from "../support/index.js"

const AGENT = "agent-t"

let http: EraHttpFixture
let server: TestServer
let dir: string
/** The store's folder (services file, keys file, key file, records): a restart reuses it. */
let store: string
const keys = { admin: "", one: "", two: "" }

const lines = (file: string): Array<string> => readFileSync(file, "utf8").split("\n").filter((l) => l !== "")

beforeAll(async () => {
  http = await startEraHttpFixture()
  dir = mkdtempSync(join(tmpdir(), "tasks-"))
  store = freshDir()
  const keysFile = join(store, "mcp-store.keys.json")
  for (const [name, argv] of [
    ["admin", ["--role", "admin"]],
    ["one", ["--role", "agent", "--agent", AGENT]],
    ["two", ["--role", "agent", "--agent", AGENT]]
  ] as const) {
    let out = ""
    const code = await runKeys(["create", "--name", name, ...argv, "--keys-file", keysFile], {}, { writeOut: (t) => void (out += t), writeErr: () => undefined })
    expect(code).toBe(0)
    keys[name] = out.trim()
  }
  server = await startTestServer({ dir: store })
  const admin = authedApi(server.url, keys.admin)
  for (const [prefix, def] of [
    ["/for_store", { name: "mod", url: http.url }],
    ["/for_store", localService("loc", eraStdio("reject", join(dir, "stdio.log")))],
    [`/for_agent/${AGENT}`, { name: "mod", url: http.url }]
  ] as const) {
    const r = await addService(admin, prefix, def)
    expect(r.status, r.text).toBe(200)
  }
  await waitStatus(admin, "/for_store", "loc", "healthy", 30)
  await waitStatus(admin, "/for_store", "mod", "healthy", 30)
  await waitStatus(admin, `/for_agent/${AGENT}`, "mod", "healthy", 30)
}, 60_000)

afterAll(async () => {
  await server?.cleanup()
  await http?.stop()
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true })
})

const api = () => authedApi(server.url, keys.admin)

interface Answer {
  readonly status: number
  readonly message: { result?: Record<string, any>; error?: { code: number; message: string; data?: unknown } }
}

/** One modern request to `path` with `key` (the admin's by default), the extension declared unless `tasks` is false: its status and JSON-RPC answer. */
const modern = async (
  path: string,
  method: string,
  params: Record<string, unknown>,
  options: { key?: string | undefined; tasks?: boolean; name?: string | null; headers?: Record<string, string | null>; version?: string } = {}
): Promise<Answer> => {
  const answer = await modernRequest(server.url + path, method, params, {
    key: options.key ?? keys.admin,
    capabilities: options.tasks === false ? {} : withTasks,
    ...(options.version !== undefined ? { version: options.version } : {}),
    headers: { ...(options.name !== undefined ? { "mcp-name": options.name } : {}), ...options.headers }
  })
  return { status: answer.status, message: answer.response }
}

/** Polls a store task with tasks/get until `until` holds (or 10 s pass): the last answer. */
const pollUntil = async (path: string, taskId: string, until: (task: Record<string, any>) => boolean, key?: string): Promise<Record<string, any>> => {
  const deadline = Date.now() + 10_000
  for (;;) {
    const got = await modern(path, "tasks/get", { taskId }, { key })
    expect(got.message.error, JSON.stringify(got.message)).toBeUndefined()
    const task = got.message.result!
    if (until(task) || Date.now() > deadline) return task
    await new Promise((resolve) => setTimeout(resolve, Math.min(Number(task["pollIntervalMs"]) || 50, 200)))
  }
}

const records = async (tool: string) => ((await api().get(`/for_store/tool_records?tool_name=${tool}&limit=100`)).body.executions as Array<{ outcome: string; error: string | null; result: unknown; params: Record<string, unknown>; trace_id: string }>) ?? []

describe("a caller that cannot take a task gets the call's result", { timeout: 30_000 }, () => {
  it("REST: the store polls a modern upstream's task to its end (HTTP and stdio), each change a progress on /events", async () => {
    for (const service of ["mod", "loc"]) {
      const progress: Array<ProgressEvent> = []
      const off = server.running.store.progress.on((e) => void progress.push(e))
      try {
        const reply = await api().post("/for_store/call_tool", { tool_name: `${service}__job`, args: { steps: 3, step_ms: 40, poll_ms: 20 } })
        expect(reply.status, reply.text).toBe(200)
        expect(reply.body).toMatchObject({ is_error: false, structured_content: { steps: 3 }, service_name: service })
        expect(JSON.stringify(reply.body)).not.toMatch(/resultType|taskId/)
      } finally {
        off()
      }
      expect(await eventually(() => progress.some((p) => p.service_name === service && /^task working: step \d of 3$/.test(p.message ?? "")), 3000)).toBe(true)
    }
    // The upstream saw the task followed by its own id, Mcp-Name and all (the fixture refuses a mismatch).
    const requests = http.requests()
    expect(requests).toContain("POST tasks/get")
    const gets = http.headers().filter((h) => h.method === "tasks/get")
    expect(gets.length).toBeGreaterThan(0)
    expect(gets.every((h) => typeof h.name === "string" && /^[0-9a-f-]{36}$/.test(h.name))).toBe(true)
    expect(lines(join(dir, "stdio.log"))).toContain("tasks/get")
  })

  it("a failed task is an upstream error with its code; a tool error stays the tool's; the record says which", async () => {
    const failed = await api().post("/for_store/call_tool", { tool_name: "mod__job", args: { steps: 1, step_ms: 10, poll_ms: 10, fail: true } })
    expect(failed.status, failed.text).toBe(502)
    expect(failed.body.error.code).toBe("UPSTREAM_ERROR")
    expect(failed.body.error.message).toMatch(/-32603: job failed on purpose/)
    const toolError = await api().post("/for_store/call_tool", { tool_name: "loc__job", args: { steps: 1, step_ms: 10, poll_ms: 10, tool_error: true } })
    expect(toolError.status, toolError.text).toBe(200)
    expect(toolError.body).toMatchObject({ is_error: true, result: "job failed as asked" })
    const outcomes = (await records("job")).map((r) => r.outcome)
    expect(outcomes).toEqual(expect.arrayContaining(["protocol_error", "tool_error"]))
  })

  it("the call's time-out cancels the task upstream (tasks/cancel), and the call is a TOOL_TIMEOUT", async () => {
    const reply = await api().post("/for_store/call_tool", { tool_name: "mod__forever", timeout: 0.5 })
    expect(reply.status, reply.text).toBe(504)
    expect(reply.body.error.code).toBe("TOOL_TIMEOUT")
    expect(await eventually(() => http.notes().some((n) => n.startsWith("cancelled task ")), 3000)).toBe(true)
    expect(http.requests()).toContain("POST tasks/cancel")
  })

  it("a task's input request goes to the REST caller in rounds (accept_input_required), its answer back with tasks/update", async () => {
    const round = await api().post("/for_store/call_tool", { tool_name: "mod__job", args: { steps: 2, step_ms: 20, poll_ms: 10, ask: true }, accept_input_required: true })
    expect(round.status, round.text).toBe(200)
    expect(round.body).toMatchObject({ result_type: "input_required" })
    const [key, request] = Object.entries(round.body.input_requests as Record<string, { method: string; params: { message: string } }>)[0]!
    expect(request).toMatchObject({ method: "elicitation/create", params: { message: "Go on with the job?" } })
    const done = await api().post("/for_store/call_tool", {
      tool_name: "mod__job",
      request_state: round.body.request_state,
      input_responses: { [key]: { action: "accept", content: { ok: true } } }
    })
    expect(done.body, done.text).toMatchObject({ result_type: "complete", structured_content: { steps: 2 } })
    expect(http.requests()).toContain("POST tasks/update")
  })

  it("a 2025 MCP client and a modern client without the extension get the result, with progress", async () => {
    const client = new ClientV1({ name: "tasks-2025", version: "1.0.0" })
    await within(client.connect(new TransportV1(new URL(server.url + "/mcp"), { requestInit: { headers: { authorization: `Bearer ${keys.admin}` } } })), 10_000, "connect")
    try {
      const progress: Array<string> = []
      const result = await within(
        client.callTool({ name: "loc__job", arguments: { steps: 2, step_ms: 30, poll_ms: 10 } }, undefined, { onprogress: (p) => void progress.push(p.message ?? ""), timeout: 10_000 }),
        10_000,
        "2025 call"
      )
      expect(result.structuredContent).toEqual({ steps: 2 })
      expect(progress.some((m) => /^task working: step \d of 2$/.test(m))).toBe(true)
    } finally {
      await client.close()
    }
    const plain = await modern("/mcp", "tools/call", { name: "mod__job", arguments: { steps: 2, step_ms: 20, poll_ms: 10 } }, { tasks: false })
    expect(plain.message.result).toMatchObject({ resultType: "complete", structuredContent: { steps: 2 } })
  })
})

describe("a modern client that declared the extension follows the task through the store", { timeout: 30_000 }, () => {
  it("server/discover declares the extension", async () => {
    const discovered = await modern("/mcp", "server/discover", {})
    expect(discovered.message.result?.["capabilities"]?.["extensions"]).toEqual({ [TASKS]: {} })
  })

  it("tools/call answers a task of the store's; tasks/get relays the upstream's state to its end; the call is one record, written at its end", async () => {
    for (const service of ["mod", "loc"]) {
      const started = await modern("/mcp", "tools/call", { name: `${service}__job`, arguments: { steps: 3, step_ms: 60, poll_ms: 20 } })
      expect(started.status).toBe(200)
      const handle = started.message.result!
      expect(handle).toMatchObject({ resultType: "task", status: "working", ttlMs: 60_000, pollIntervalMs: 20 })
      expect(handle["taskId"]).toMatch(/^t1\./)
      expect(typeof handle["createdAt"]).toBe("string")
      const before = (await records("job")).length
      const ended = await pollUntil("/mcp", handle["taskId"], (t) => t["status"] === "completed")
      expect(ended).toMatchObject({ resultType: "complete", taskId: handle["taskId"], status: "completed", result: { resultType: "complete", structuredContent: { steps: 3 }, content: [{ type: "text", text: "job done: 3 steps" }] } })
      // Recorded once, at the end it was seen; polling again records nothing more.
      expect(await eventually(async () => (await records("job")).length === before + 1, 3000)).toBe(true)
      await modern("/mcp", "tasks/get", { taskId: handle["taskId"] })
      expect((await records("job")).length).toBe(before + 1)
      expect((await records("job"))[0]).toMatchObject({ outcome: "success", result: { steps: 3 } })
    }
  })

  it("input_required: tasks/get carries the upstream's input requests, tasks/update relays the answers", async () => {
    const handle = (await modern("/mcp", "tools/call", { name: "mod__job", arguments: { steps: 2, step_ms: 20, poll_ms: 10, ask: true } })).message.result!
    const asking = await pollUntil("/mcp", handle["taskId"], (t) => t["status"] === "input_required")
    expect(asking["inputRequests"]).toEqual({ "confirm-1": expect.objectContaining({ method: "elicitation/create" }) })
    const ack = await modern("/mcp", "tasks/update", { taskId: handle["taskId"], inputResponses: { "confirm-1": { action: "accept", content: { ok: true } } } })
    expect(ack.message.result).toMatchObject({ resultType: "complete" })
    const ended = await pollUntil("/mcp", handle["taskId"], (t) => t["status"] === "completed")
    expect(ended["result"]).toMatchObject({ structuredContent: { steps: 2 } })
  })

  it("tasks/cancel relays the cancellation; a failed task carries the upstream's JSON-RPC error; each is recorded", async () => {
    const forever = (await modern("/mcp", "tools/call", { name: "mod__forever", arguments: {} })).message.result!
    const ack = await modern("/mcp", "tasks/cancel", { taskId: forever["taskId"] })
    expect(ack.message.result).toMatchObject({ resultType: "complete" })
    expect(await pollUntil("/mcp", forever["taskId"], (t) => t["status"] === "cancelled")).toMatchObject({ status: "cancelled" })
    expect(await eventually(async () => (await records("forever")).some((r) => r.outcome === "cancelled"), 3000)).toBe(true)

    const failing = (await modern("/mcp", "tools/call", { name: "mod__job", arguments: { steps: 1, step_ms: 10, poll_ms: 10, fail: true } })).message.result!
    const failed = await pollUntil("/mcp", failing["taskId"], (t) => t["status"] === "failed")
    expect(failed["error"]).toEqual({ code: -32603, message: "job failed on purpose" })
  })

  it("a completed task whose result is no tool result (a broken or hostile server) is an internal error, answered", async () => {
    const handle = (await modern("/mcp", "tools/call", { name: "mod__job", arguments: { steps: 1, step_ms: 10, poll_ms: 10, malformed: true } })).message.result!
    let got: Answer | undefined
    expect(
      await eventually(async () => {
        got = await modern("/mcp", "tasks/get", { taskId: handle["taskId"] })
        return got.message.error !== undefined || got.message.result?.["status"] !== "working"
      }, 10_000)
    ).toBe(true)
    expect(got!.status).toBe(200)
    expect(got!.message.error).toMatchObject({ code: -32603, message: expect.stringMatching(/'mod'.*not a tool result/) })
  })

  it("a task id is its key's and its scope's: another key, another scope, a changed byte are 'not found'", async () => {
    const path = `/for_agent/${AGENT}/mcp`
    const handle = (await modern(path, "tools/call", { name: "mod__forever", arguments: {} }, { key: keys.one })).message.result!
    const id = String(handle["taskId"])
    expect((await modern(path, "tasks/get", { taskId: id }, { key: keys.one })).message.result).toMatchObject({ status: "working", taskId: id })
    const notFound = { code: -32602, message: "Failed to retrieve task: Task not found" }
    // The same agent's other key, the store's own scope, a tampered id: nothing said of the task.
    expect((await modern(path, "tasks/get", { taskId: id }, { key: keys.two })).message.error).toEqual(notFound)
    expect((await modern("/mcp", "tasks/get", { taskId: id })).message.error).toEqual(notFound)
    // The last character but one changed (the last may carry unused bits): to a character it is not.
    const tampered = id.slice(0, -2) + (id.at(-2) === "A" ? "B" : "A") + id.slice(-1)
    expect(tampered).not.toBe(id)
    expect((await modern(path, "tasks/get", { taskId: tampered }, { key: keys.one })).message.error).toEqual(notFound)
    expect((await modern(path, "tasks/cancel", { taskId: id }, { key: keys.two })).message.error).toEqual(notFound)
    // Its own key can still cancel it.
    expect((await modern(path, "tasks/cancel", { taskId: id }, { key: keys.one })).message.result).toMatchObject({ resultType: "complete" })
  })

  it("the wire rules: the version and method headers (-32020), a revision served (-32022), Mcp-Name the task id (-32020), the extension declared (-32021)", async () => {
    const handle = (await modern("/mcp", "tools/call", { name: "mod__job", arguments: { steps: 1, step_ms: 10 } })).message.result!
    const mismatch = await modern("/mcp", "tasks/get", { taskId: handle["taskId"] }, { name: "something-else" })
    expect(mismatch.status).toBe(400)
    expect(mismatch.message.error?.code).toBe(-32020)
    // The version and method headers are required, and the revision must be one served, as on every modern request.
    for (const header of ["mcp-protocol-version", "mcp-method"]) {
      const missing = await modern("/mcp", "tasks/get", { taskId: handle["taskId"] }, { headers: { [header]: null } })
      expect(missing.status, header).toBe(400)
      expect(missing.message.error?.code, header).toBe(-32020)
    }
    const unsupported = await modern("/mcp", "tasks/get", { taskId: handle["taskId"] }, { version: "2027-01-01" })
    expect(unsupported.status).toBe(400)
    expect(unsupported.message.error).toMatchObject({ code: -32022, data: { supported: ["2026-07-28"], requested: "2027-01-01" } })
    const undeclared = await modern("/mcp", "tasks/get", { taskId: handle["taskId"] }, { tasks: false })
    expect(undeclared.message.error).toMatchObject({ code: -32021, data: { requiredCapabilities: { extensions: { [TASKS]: {} } } } })
    // Task notifications on subscriptions/listen too.
    const listen = await modern("/mcp", "subscriptions/listen", { notifications: { taskIds: [handle["taskId"]] } }, { tasks: false })
    expect(listen.message.error).toMatchObject({ code: -32021 })
  })
})

describe("a store restarted on the same services file", { timeout: 30_000 }, () => {
  it("still opens the task ids it handed out (the key file's secret): tasks/get answers the upstream's state; the calls it followed were recorded interrupted at the stop, once", async () => {
    const job = (await modern("/mcp", "tools/call", { name: "mod__job", arguments: { steps: 7, step_ms: 150, poll_ms: 20 } })).message.result!
    const forever = (await modern("/mcp", "tools/call", { name: "mod__forever", arguments: {} })).message.result!
    for (const handle of [job, forever]) expect(handle).toMatchObject({ resultType: "task", status: "working", taskId: expect.stringMatching(/^t1\./) })
    const interrupted = async () => (await api().get("/for_store/tool_records?outcome=interrupted&limit=100")).body.executions as Array<{ tool_name: string; params: Record<string, unknown>; error: string | null }>
    expect((await interrupted()).filter((r) => r.tool_name === "forever" || r.params["steps"] === 7)).toEqual([])

    // The secret of the ids is the key file beside the services file (unless MCPSTORE_SECRET_KEY is set).
    if (process.env["MCPSTORE_SECRET_KEY"] === undefined) expect(existsSync(`${server.file}.key`)).toBe(true)
    // Stopped while both run upstream (the HTTP fixture outlives the store), started again on the same folder.
    await server.close()
    server = await startTestServer({ dir: store })
    await waitStatus(api(), "/for_store", "mod", "healthy", 30)

    // Recorded at the stop (TaskRelays.close): once each, interrupted.
    const mine = (await interrupted()).filter((r) => r.tool_name === "forever" || (r.tool_name === "job" && r.params["steps"] === 7))
    expect(mine.map((r) => r.tool_name).sort()).toEqual(["forever", "job"])
    for (const r of mine) expect(r.error).toBe("the store stopped before the task's end was seen")

    // The ids open after the restart: the upstream's state, under the store's id.
    expect((await modern("/mcp", "tasks/get", { taskId: forever["taskId"] })).message.result).toMatchObject({ taskId: forever["taskId"], status: "working" })
    const ended = await pollUntil("/mcp", job["taskId"], (t) => t["status"] === "completed")
    expect(ended).toMatchObject({ taskId: job["taskId"], status: "completed", result: { structuredContent: { steps: 7 } } })
    expect((await modern("/mcp", "tasks/cancel", { taskId: forever["taskId"] })).message.result).toMatchObject({ resultType: "complete" })
    expect(await pollUntil("/mcp", forever["taskId"], (t) => t["status"] === "cancelled")).toMatchObject({ status: "cancelled" })
    // The restarted store did not follow them: no second record of either.
    await new Promise((resolve) => setTimeout(resolve, 200))
    const all = (await records("job")).filter((r) => r.params["steps"] === 7)
    expect(all.map((r) => r.outcome)).toEqual(["interrupted"])
    expect((await records("forever")).filter((r) => r.outcome === "interrupted")).toHaveLength(1)
  })
})
