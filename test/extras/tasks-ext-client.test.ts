// The store's relay of the tasks extension (2026-07-28) against a requester we did not write: the
// official @modelcontextprotocol/ext-tasks client (pinned in package.json) over an SDK v2 Client
// pinned to 2026-07-28. test/extras/tasks.test.ts checks the relay with raw requests shaped as we
// read the spec; this one checks that an independent reading of it (the package's schemas: a task's
// createdAt/lastUpdatedAt/ttlMs, resultType, Mcp-Name on task requests, the failed task's error,
// inputRequests answered with tasks/update) can drive the store's tasks to their end: completed,
// cancelled, failed with the upstream's JSON-RPC error, input asked and answered, and a plain tool's
// immediate result through the same session. The package leaves the V2 HTTP request to the host
// (`rawDispatch`): here one POST per request with the era's headers, as the SDK's transport sends them.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import {
  createTaskSessionFromClient,
  resultFromTaskOutcome,
  TaskFailedError,
  type ApplicationInputRequest,
  type JsonRpcResponse,
  type RawClientDispatch,
  type ResolvedInputExchangeContext,
  type TaskEnabledSession
} from "@modelcontextprotocol/ext-tasks/client"
import { join } from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { runKeys } from "../../src/cli/keys-command.js"
import { startEraHttpFixture, type EraHttpFixture } from "../fixtures/era-http.js"
import { addService, authedApi, freshDir, startTestServer, waitStatus, within, type TestServer } from "../support/index.js"

const MODERN = "2026-07-28"
const TASKS = "io.modelcontextprotocol/tasks"

let http: EraHttpFixture
let server: TestServer
let admin = ""
const closers: Array<() => Promise<unknown>> = []

beforeAll(async () => {
  http = await startEraHttpFixture()
  const dir = freshDir()
  let out = ""
  const code = await runKeys(["create", "--name", "admin", "--role", "admin", "--keys-file", join(dir, "mcp-store.keys.json")], {}, { writeOut: (t) => void (out += t), writeErr: () => undefined })
  expect(code).toBe(0)
  admin = out.trim()
  server = await startTestServer({ dir })
  const api = authedApi(server.url, admin)
  const r = await addService(api, "/for_store", { name: "mod", url: http.url })
  expect(r.status, r.text).toBe(200)
  await waitStatus(api, "/for_store", "mod", "healthy", 30)
}, 60_000)

afterAll(async () => {
  await server?.cleanup()
  await http?.stop()
})

afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => within(close(), 3000, "close").catch(() => undefined)))
})

/** The wire of the requests the host sent for the package: method, Mcp-Name header, params. */
interface Sent {
  readonly method: string
  readonly name: string | undefined
  readonly params: Record<string, unknown>
}

/**
 * The host's request path for the package's V2 requests (tools/call, tasks/*): one POST to the
 * store's /mcp with the 2026-07-28 headers (MCP-Protocol-Version, Mcp-Method, and Mcp-Name: the
 * package's own for task requests, the tool's name for tools/call), the JSON-RPC answer of its id
 * read from a JSON body or an SSE stream.
 */
const rawDispatchTo = (url: string, key: string, sent: Array<Sent>): RawClientDispatch => {
  let next = 1
  return async (request, options) => {
    const { method, params = {} } = request as { method: string; params?: Record<string, unknown> }
    const given = Object.fromEntries(Object.entries(options?.context?.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v]))
    const name = given["mcp-name"] ?? (method === "tools/call" && typeof params["name"] === "string" ? params["name"] : undefined)
    sent.push({ method, name, params })
    const id = next++
    const res = await fetch(url, {
      method: "POST",
      headers: {
        ...given,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        authorization: `Bearer ${key}`,
        "mcp-protocol-version": MODERN,
        "mcp-method": method,
        ...(name !== undefined ? { "mcp-name": name } : {})
      },
      body: JSON.stringify({ jsonrpc: "2.0", id, method, params }),
      ...(options?.signal !== undefined ? { signal: options.signal } : {})
    })
    const text = await res.text()
    const messages: Array<Record<string, any>> = (res.headers.get("content-type") ?? "").startsWith("text/event-stream")
      ? text
          .split("\n")
          .filter((l) => l.startsWith("data:"))
          .map((l) => JSON.parse(l.slice(5)))
      : [JSON.parse(text)]
    const answer = messages.find((m) => m["id"] === id)
    if (answer === undefined) throw new Error(`no answer to ${method} (HTTP ${res.status}): ${text}`)
    return (answer["error"] !== undefined ? { kind: "error", error: answer["error"] } : { kind: "result", result: answer["result"] }) as JsonRpcResponse
  }
}

/** An ext-tasks session over an SDK v2 client pinned to 2026-07-28 on the store's /mcp; closed after the test. */
const taskSession = async (
  onInput?: (request: ApplicationInputRequest, context: ResolvedInputExchangeContext) => Promise<any>
): Promise<{ session: TaskEnabledSession; sent: Array<Sent>; client: Client }> => {
  const url = new URL(server.url + "/mcp")
  const client = new Client({ name: "ext-tasks-test", version: "1.0.0" }, { versionNegotiation: { mode: { pin: MODERN } } })
  client.onerror = () => undefined
  await within(client.connect(new StreamableHTTPClientTransport(url, { requestInit: { headers: { authorization: `Bearer ${admin}` } } })), 10_000, "connect")
  closers.push(() => client.close())
  const sent: Array<Sent> = []
  const session = createTaskSessionFromClient(client, {
    endpointId: "mcp-store-test",
    rawDispatch: rawDispatchTo(url.href, admin, sent),
    v2RequestFraming: { protocolVersion: MODERN, clientInfo: { name: "ext-tasks-test", version: "1.0.0" }, clientCapabilities: {} },
    ...(onInput !== undefined ? { onInputRequest: onInput as never } : {})
  })
  closers.unshift(() => session.close())
  return { session, sent, client }
}

describe("the ext-tasks requester drives the store's task relay", { timeout: 30_000 }, () => {
  it("the session sees the store's tasks extension (server/discover) and takes the 2026-07-28 generation", async () => {
    const { session, client } = await taskSession()
    expect(client.getProtocolEra()).toBe("modern")
    expect(client.getServerCapabilities()?.extensions?.[TASKS]).toEqual({})
    expect(session.capabilities).toMatchObject({ execution: true })
  })

  it("a task-backed job settles completed with the upstream's result; the package polled tasks/get under the store's id", async () => {
    const { session, sent } = await taskSession()
    const execution = await within(session.callTool("mod__job", { steps: 3, step_ms: 50, poll_ms: 20 }), 10_000, "callTool")
    expect(execution.kind).toBe("task")
    const taskId = execution.kind === "task" ? String(execution.handle.taskId) : ""
    expect(taskId).toMatch(/^t1\./)
    const { outcome, lastTask } = await within(execution.settle(), 10_000, "settle")
    expect(outcome.status, JSON.stringify(outcome)).toBe("completed")
    const result = resultFromTaskOutcome(outcome) as Record<string, unknown>
    expect(result).toMatchObject({ structuredContent: { steps: 3 }, content: [{ type: "text", text: "job done: 3 steps" }] })
    expect(lastTask).toMatchObject({ taskId, status: "completed" })
    // The wire as the package framed it: the extension declared on each request, Mcp-Name the task id.
    const gets = sent.filter((s) => s.method === "tasks/get")
    expect(gets.length).toBeGreaterThan(0)
    expect(gets.every((g) => g.name === taskId && g.params["taskId"] === taskId)).toBe(true)
    expect(sent.every((s) => (s.params["_meta"] as any)?.["io.modelcontextprotocol/clientCapabilities"]?.extensions?.[TASKS] !== undefined)).toBe(true)
  })

  it("a forever task cancelled through the execution settles cancelled, the cancellation relayed upstream", async () => {
    const { session, sent } = await taskSession()
    const execution = await within(session.callTool("mod__forever", {}), 10_000, "callTool")
    expect(execution.kind).toBe("task")
    const settled = execution.settle()
    await within(execution.cancel(), 10_000, "cancel")
    const { outcome } = await within(settled, 10_000, "settle")
    expect(outcome.status).toBe("cancelled")
    expect(sent.some((s) => s.method === "tasks/cancel")).toBe(true)
    expect(http.requests()).toContain("POST tasks/cancel")
    expect(http.notes().some((n) => n.startsWith("cancelled task "))).toBe(true)
  })

  it("a failed job settles failed, carrying the upstream's JSON-RPC error", async () => {
    const { session } = await taskSession()
    const execution = await within(session.callTool("mod__job", { steps: 1, step_ms: 10, poll_ms: 10, fail: true }), 10_000, "callTool")
    expect(execution.kind).toBe("task")
    const { outcome } = await within(execution.settle(), 10_000, "settle")
    expect(outcome.status).toBe("failed")
    if (outcome.status !== "failed") return
    expect(outcome.error).toBeInstanceOf(TaskFailedError)
    expect(outcome.error.code).toBe(-32603)
    expect(outcome.error.message).toBe("job failed on purpose")
    expect(() => resultFromTaskOutcome(outcome)).toThrow(TaskFailedError)
  })

  it("a job that asks: the package's input handler answers elicitation confirm-1 (tasks/update), the job completes", async () => {
    const asked: Array<{ kind: string; inputId: string | undefined; message: unknown }> = []
    const { session, sent } = await taskSession(async (request, context) => {
      asked.push({ kind: request.kind, inputId: context.inputId, message: request.params?.["message"] })
      return { action: "accept", content: { ok: true } }
    })
    const execution = await within(session.callTool("mod__job", { steps: 2, step_ms: 20, poll_ms: 10, ask: true }), 10_000, "callTool")
    expect(execution.kind).toBe("task")
    const { outcome } = await within(execution.settle(), 10_000, "settle")
    expect(outcome.status, JSON.stringify(outcome)).toBe("completed")
    expect(resultFromTaskOutcome(outcome)).toMatchObject({ structuredContent: { steps: 2 } })
    expect(asked).toEqual([{ kind: "elicitation", inputId: "confirm-1", message: "Go on with the job?" }])
    const update = sent.find((s) => s.method === "tasks/update")
    expect(update?.params["inputResponses"]).toEqual({ "confirm-1": { action: "accept", content: { ok: true } } })
  })

  it("a plain tool through the same session is an immediate result", async () => {
    const { session } = await taskSession()
    const execution = await within(session.callTool("mod__echo", { text: "hello" }), 10_000, "callTool")
    expect(execution.kind).toBe("immediate")
    const { outcome } = await within(execution.settle(), 10_000, "settle")
    expect(outcome.status).toBe("completed")
    expect(resultFromTaskOutcome(outcome)).toMatchObject({ resultType: "complete", content: [{ type: "text", text: "hello" }] })
  })
})
