// The era fixtures' task tools (test/fixtures/era-tasks.ts), driven with raw JSON-RPC over Streamable
// HTTP and stdio: job and forever as tasks of the io.modelcontextprotocol/tasks extension (handle,
// tasks/get polling, input_required answered by tasks/update, tasks/cancel), the errors (unknown
// task, missing capability, a header mismatch over HTTP), the synchronous answers without the
// extension (and to a 2025 client), and the bound and expiry of an instance's tasks.
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { createInterface } from "node:readline"
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest"
import { startEraHttpFixture, type EraHttpFixture } from "../fixtures/era-http.js"
import { createTaskTools } from "../fixtures/era-tasks.js"
import { eraStdio } from "../fixtures/paths.js"
import { modernRequest, withTasks } from "../support/index.js"

const EXT = "io.modelcontextprotocol/tasks"
const meta = (tasks: boolean) => ({
  "io.modelcontextprotocol/protocolVersion": "2026-07-28",
  "io.modelcontextprotocol/clientInfo": { name: "tasks-test", version: "1.0.0" },
  "io.modelcontextprotocol/clientCapabilities": tasks ? { extensions: { [EXT]: {} } } : {}
})

interface Answer {
  readonly status: number
  readonly body: { id?: unknown; result?: Record<string, any>; error?: { code: number; message: string; data?: unknown } }
}
/** Sends one request; `tasks` declares the extension, `headers` overrides the modern headers. */
type Send = (method: string, params: Record<string, unknown>, options?: { tasks?: boolean; headers?: Record<string, string> }) => Promise<Answer>

const deadline = 2_000
const untilStatus = async (send: Send, taskId: string, status: string): Promise<Record<string, any>> => {
  const end = Date.now() + deadline
  for (;;) {
    const { body } = await send("tasks/get", { taskId })
    if (body.result?.["status"] === status || Date.now() > end) return body.result ?? {}
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

const MISSING = { code: -32021, message: "Missing required client capability", data: { requiredCapabilities: { extensions: { [EXT]: {} } } } }

/** The checks both transports pass. */
const common = (send: () => Send, notes: () => Promise<ReadonlyArray<string>>) => {
  const job = (args: Record<string, unknown>, tasks = true) => send()("tools/call", { name: "job", arguments: { step_ms: 5, poll_ms: 20, ...args } }, { tasks })

  it("lists job and forever", async () => {
    const { body } = await send()("tools/list", {})
    const tools = body.result?.["tools"] as Array<{ name: string; description: string; inputSchema: { properties?: Record<string, unknown> } }>
    const job = tools.find((t) => t.name === "job")!
    expect(Object.keys(job.inputSchema.properties ?? {})).toEqual(["steps", "step_ms", "poll_ms", "fail", "tool_error", "ask", "malformed"])
    expect(job.description).toMatch(/task/)
    expect(tools.find((t) => t.name === "forever")?.description).toMatch(/only runs as a task/)
  })

  it("job: a task handle at once, then polled to completed", async () => {
    const { status, body } = await job({ steps: 3 })
    expect(status).toBe(200)
    const handle = body.result!
    expect(handle).toMatchObject({ resultType: "task", status: "working", ttlMs: 60_000, pollIntervalMs: 20 })
    expect(handle["taskId"]).toMatch(/^[0-9a-f-]{36}$/)
    expect(new Date(handle["createdAt"]).toISOString()).toBe(handle["createdAt"])
    const done = await untilStatus(send(), handle["taskId"], "completed")
    expect(done).toMatchObject({
      resultType: "complete",
      taskId: handle["taskId"],
      status: "completed",
      createdAt: handle["createdAt"],
      ttlMs: 60_000,
      pollIntervalMs: 20,
      result: { content: [{ type: "text", text: "job done: 3 steps" }], structuredContent: { steps: 3 } }
    })
    expect(done["error"]).toBeUndefined()
    expect(done["inputRequests"]).toBeUndefined()
  })

  it("job: fail ends failed with its error; tool_error completes with isError", async () => {
    const failing = (await job({ steps: 1, fail: true })).body.result!
    const failed = await untilStatus(send(), failing["taskId"], "failed")
    expect(failed["error"]).toEqual({ code: -32603, message: "job failed on purpose" })
    expect(failed["statusMessage"]).toMatch(/failed on purpose/)
    expect(failed["result"]).toBeUndefined()
    const erring = (await job({ steps: 1, tool_error: true })).body.result!
    const completed = await untilStatus(send(), erring["taskId"], "completed")
    expect(completed["result"]).toEqual({ content: [{ type: "text", text: "job failed as asked" }], isError: true })
  })

  it("job with ask: input_required, answered by tasks/update, then completed; a decline ends it", async () => {
    const asking = (await job({ steps: 2, ask: true })).body.result!
    const waiting = await untilStatus(send(), asking["taskId"], "input_required")
    const keys = Object.keys(waiting["inputRequests"] ?? {})
    expect(keys).toHaveLength(1)
    expect(keys[0]).toMatch(/^confirm-/)
    expect(waiting["inputRequests"][keys[0]!]).toEqual({
      method: "elicitation/create",
      params: { mode: "form", message: "Go on with the job?", requestedSchema: { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"] } }
    })
    // An answer to a key that is not outstanding is ignored.
    expect((await send()("tasks/update", { taskId: asking["taskId"], inputResponses: { other: { action: "decline" } } })).body.result).toEqual({ resultType: "complete" })
    expect((await send()("tasks/get", { taskId: asking["taskId"] })).body.result?.["status"]).toBe("input_required")
    const update = await send()("tasks/update", { taskId: asking["taskId"], inputResponses: { [keys[0]!]: { action: "accept", content: { ok: true } } } })
    expect(update.body.result).toEqual({ resultType: "complete" })
    expect((await untilStatus(send(), asking["taskId"], "completed"))["result"]).toEqual({
      content: [{ type: "text", text: "job done: 2 steps" }],
      structuredContent: { steps: 2 }
    })

    const declining = (await job({ steps: 2, ask: true })).body.result!
    const key = Object.keys((await untilStatus(send(), declining["taskId"], "input_required"))["inputRequests"])[0]!
    await send()("tasks/update", { taskId: declining["taskId"], inputResponses: { [key]: { action: "decline" } } })
    const declined = (await send()("tasks/get", { taskId: declining["taskId"] })).body.result!
    expect(declined).toMatchObject({ status: "completed", result: { content: [{ type: "text", text: "declined: decline" }], isError: true } })
  })

  it("forever: working until tasks/cancel, then cancelled (and noted)", async () => {
    const handle = (await send()("tools/call", { name: "forever", arguments: {} })).body.result!
    expect(handle).toMatchObject({ resultType: "task", status: "working", statusMessage: "waiting" })
    await new Promise((resolve) => setTimeout(resolve, 30))
    expect((await send()("tasks/get", { taskId: handle["taskId"] })).body.result).toMatchObject({ status: "working", statusMessage: "waiting" })
    expect((await send()("tasks/cancel", { taskId: handle["taskId"] })).body.result).toEqual({ resultType: "complete" })
    expect((await send()("tasks/get", { taskId: handle["taskId"] })).body.result?.["status"]).toBe("cancelled")
    expect(await notes()).toContain(`cancelled task ${handle["taskId"]}`)
    // Cancelling a terminal task changes nothing.
    expect((await send()("tasks/cancel", { taskId: handle["taskId"] })).body.result).toEqual({ resultType: "complete" })
    expect((await send()("tasks/get", { taskId: handle["taskId"] })).body.result?.["status"]).toBe("cancelled")
  })

  it("an unknown task: -32602; tasks/* or forever without the extension: -32021", async () => {
    for (const method of ["tasks/get", "tasks/update", "tasks/cancel"]) {
      expect((await send()(method, { taskId: "no-such-task", inputResponses: {} })).body.error).toEqual({
        code: -32602,
        message: "Failed to retrieve task: Task not found"
      })
      expect((await send()(method, { taskId: "no-such-task" }, { tasks: false })).body.error).toEqual(MISSING)
    }
    expect((await send()("tools/call", { name: "forever", arguments: {} }, { tasks: false })).body.error).toEqual(MISSING)
  })

  it("job without the extension: answered when done", async () => {
    expect((await job({ steps: 2 }, false)).body.result).toEqual({
      resultType: "complete",
      content: [{ type: "text", text: "job done: 2 steps" }],
      structuredContent: { steps: 2 }
    })
    expect((await job({ steps: 2, ask: true }, false)).body.result).toEqual({
      resultType: "complete",
      content: [{ type: "text", text: "job needs input, which only a task can ask for" }],
      isError: true
    })
    expect((await job({ steps: 2, fail: true }, false)).body.error).toEqual({ code: -32603, message: "job failed on purpose" })
  })
}

describe("the task tools over Streamable HTTP", () => {
  let fixture: EraHttpFixture
  beforeAll(async () => {
    fixture = await startEraHttpFixture()
  })
  afterAll(async () => {
    await fixture.stop()
  })

  let id = 0
  const send: Send = async (method, params, options = {}) => {
    const answer = await modernRequest(fixture.url, method, params, { capabilities: (options.tasks ?? true) ? withTasks : {}, id: ++id, ...(options.headers !== undefined ? { headers: options.headers } : {}) })
    expect(answer.headers.get("content-type")).toMatch(/^application\/json/)
    return { status: answer.status, body: answer.response as Answer["body"] }
  }

  common(
    () => send,
    async () => fixture.notes()
  )

  it("tasks/* whose Mcp-Name or Mcp-Method differs from the body: 400, -32020 naming the header", async () => {
    const taskId = (await send("tools/call", { name: "forever", arguments: {} })).body.result!["taskId"] as string
    const wrongName = await send("tasks/get", { taskId }, { headers: { "mcp-name": "another" } })
    expect(wrongName.status).toBe(400)
    expect(wrongName.body.error?.code).toBe(-32020)
    expect(wrongName.body.error?.message).toContain("Mcp-Name")
    const missingName = await fetch(fixture.url, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json", "mcp-protocol-version": "2026-07-28", "mcp-method": "tasks/cancel" },
      body: JSON.stringify({ jsonrpc: "2.0", id: "x", method: "tasks/cancel", params: { taskId, _meta: meta(true) } })
    })
    expect(missingName.status).toBe(400)
    expect(((await missingName.json()) as Answer["body"]).error).toMatchObject({ code: -32020, message: expect.stringContaining("Mcp-Name header is absent") })
    const wrongMethod = await send("tasks/cancel", { taskId }, { headers: { "mcp-method": "tasks/get" } })
    expect(wrongMethod.status).toBe(400)
    expect(wrongMethod.body.error?.message).toContain("Mcp-Method")
    // None of them reached the task.
    expect((await send("tasks/get", { taskId })).body.result?.["status"]).toBe("working")
    expect(fixture.requests()).toEqual(expect.arrayContaining(["POST tasks/get", "POST tasks/cancel", "POST tasks/update"]))
    expect(fixture.headers().at(-1)).toMatchObject({ method: "tasks/get", name: taskId, version: "2026-07-28" })
    await send("tasks/cancel", { taskId })
  })

  it("a 2025 client of a dual-era fixture gets job synchronously (the SDK's tool handlers)", async () => {
    const dual = await startEraHttpFixture({ legacy: "stateless" })
    try {
      const call = async (args: Record<string, unknown>) => {
        const response = await fetch(dual.url, {
          method: "POST",
          headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25" },
          body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "job", arguments: { step_ms: 5, ...args } } })
        })
        const text = await response.text()
        const data = text.split("\n").find((line) => line.startsWith("data: "))
        return (JSON.parse(data !== undefined ? data.slice(6) : text) as Answer["body"]).result
      }
      expect(await call({ steps: 2 })).toEqual({ content: [{ type: "text", text: "job done: 2 steps" }], structuredContent: { steps: 2 } })
      expect(await call({ steps: 1, fail: true })).toEqual({ content: [{ type: "text", text: "job failed on purpose" }], isError: true })
    } finally {
      await dual.stop()
    }
  })
})

describe("the task tools over stdio", () => {
  let dir: string
  let log: string
  let child: ChildProcessWithoutNullStreams
  const waiting = new Map<unknown, (body: Answer["body"]) => void>()
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "era-tasks-"))
    log = join(dir, "log")
    const launch = eraStdio("reject", log)
    child = spawn(launch.command, [...launch.args], { stdio: ["pipe", "pipe", "pipe"] })
    child.stderr.resume()
    createInterface({ input: child.stdout }).on("line", (line) => {
      const body = JSON.parse(line) as Answer["body"]
      waiting.get(body.id)?.(body)
      waiting.delete(body.id)
    })
  })
  afterAll(async () => {
    const exited = new Promise((resolve) => child.once("exit", resolve))
    child.stdin.end()
    child.kill()
    await exited
    rmSync(dir, { recursive: true, force: true })
  })

  let id = 0
  const send: Send = (method, params, options = {}) =>
    new Promise((resolve) => {
      const requestId = ++id
      waiting.set(requestId, (body) => resolve({ status: 200, body }))
      child.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", id: requestId, method, params: { ...params, _meta: meta(options.tasks ?? true) } })}\n`)
    })

  common(
    () => send,
    async () => readFileSync(log, "utf8").split("\n")
  )
})

describe("an instance's tasks", () => {
  afterEach(() => {
    vi.useRealTimers()
  })
  const request = (id: number, method: string, params: Record<string, unknown>) => ({ jsonrpc: "2.0", id, method, params: { ...params, _meta: meta(true) } })
  /** The answer, read loosely. */
  const loose = async (answer: Promise<unknown> | undefined) => (await answer) as { result: Record<string, any>; error: unknown }

  it("are at most 100 (then -32603 too many tasks), and are gone 60 s after they were created", async () => {
    vi.useFakeTimers()
    const tools = createTaskTools(() => {})
    try {
      const ids: Array<string> = []
      for (let i = 0; i < 100; i++) {
        const answer = await loose(tools.handle(request(i, "tools/call", { name: "forever", arguments: {} })))
        ids.push(answer.result["taskId"])
      }
      expect(await tools.handle(request(100, "tools/call", { name: "job", arguments: {} }))).toEqual({
        jsonrpc: "2.0",
        id: 100,
        error: { code: -32603, message: "too many tasks" }
      })
      vi.advanceTimersByTime(59_999)
      expect((await loose(tools.handle(request(101, "tasks/get", { taskId: ids[0] })))).result["status"]).toBe("working")
      vi.advanceTimersByTime(1)
      expect((await loose(tools.handle(request(102, "tasks/get", { taskId: ids[0] })))).error).toEqual({
        code: -32602,
        message: "Failed to retrieve task: Task not found"
      })
      expect((await loose(tools.handle(request(103, "tools/call", { name: "forever", arguments: {} })))).result["status"]).toBe("working")
    } finally {
      tools.stop()
    }
  })

  it("are not the SDK's when the request is not modern, or is another method or tool", () => {
    const tools = createTaskTools(() => {})
    expect(tools.handle({ jsonrpc: "2.0", id: 1, method: "tasks/get", params: { taskId: "x" } })).toBeUndefined()
    expect(tools.handle(request(2, "tools/call", { name: "echo", arguments: { text: "a" } }))).toBeUndefined()
    expect(tools.handle(request(3, "tools/call", { name: "job", arguments: { steps: 0 } }))).toBeUndefined()
    expect(tools.handle(request(4, "tasks/list", {}))).toBeUndefined()
    expect(tools.handle({ jsonrpc: "2.0", method: "notifications/cancelled", params: { _meta: meta(true) } })).toBeUndefined()
    tools.stop()
  })
})
