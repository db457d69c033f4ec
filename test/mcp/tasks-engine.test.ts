// The engine following a server's task (src/mcp/session.ts `driveTask`) against a scripted server
// on an in-process transport (a unit test: each answer is chosen to break one rule, which a real
// fixture would not do): a task id past 512 characters, another task's answer, an unknown status and
// too many input requests are protocol errors, each with the task cancelled upstream; a server that
// asks polls every 1 ms is polled no faster than every 25 ms; an input request is answered once however
// often it is shown; a task whose state never changes times out, one whose message changes keeps the
// call alive but never past its total cap; a store that stops leaves the task to the caller that
// follows it again, and cancels it otherwise; a 2025-11-25 tool that requires tasks is called with
// `task` and its result read with tasks/result.
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js"
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js"
import { describe, expect, it } from "vitest"
import { Session } from "../../src/mcp/session.js"
import { upstreamSchemaValidator } from "../../src/mcp/json-schema.js"
import { STORE_STOPPING, type CallHooks, type CallProgress } from "../../src/mcp/types.js"
import { Cancel } from "../../src/domain/cancellation.js"

type Request = { readonly id: number; readonly method: string; readonly params?: Record<string, any> }
/** The scripted server: the result of each request (undefined: no answer). */
type Script = (request: Request) => Record<string, unknown> | undefined

/** An in-process transport that hands each request to `script` and answers with its result a turn later. */
class ScriptedTransport implements Transport {
  onmessage?: (message: JSONRPCMessage) => void
  onclose?: () => void
  onerror?: (error: Error) => void
  readonly sent: Array<Request> = []
  constructor(private readonly script: Script) {}
  async start(): Promise<void> {}
  async close(): Promise<void> {
    this.onclose?.()
  }
  async send(message: JSONRPCMessage): Promise<void> {
    const m = message as unknown as { id?: number; method?: string; params?: Record<string, any> }
    if (typeof m.method !== "string") return
    this.sent.push({ id: m.id ?? -1, method: m.method, ...(m.params !== undefined ? { params: m.params } : {}) })
    if (m.id === undefined) return
    const result = this.script({ id: m.id, method: m.method, ...(m.params !== undefined ? { params: m.params } : {}) })
    if (result !== undefined) setImmediate(() => this.onmessage?.({ jsonrpc: "2.0", id: m.id!, result } as JSONRPCMessage))
  }
  methods(): Array<string> {
    return this.sent.map((r) => r.method)
  }
}

const DISCOVERY = { supportedVersions: ["2026-07-28"], capabilities: { tools: {} }, serverInfo: { name: "scripted", version: "1" } }

/** A session on the scripted server, in the modern era (or 2025-11-25, its tool list given). */
const sessionOn = async (script: Script, era: "modern" | "2025" = "modern", tools: Array<Record<string, unknown>> = []) => {
  const transport = new ScriptedTransport(script)
  const session = new Session(transport, { clientInfo: { name: "t", version: "1" }, validator: upstreamSchemaValidator }, { onNotification: () => {}, onError: () => {}, onClose: () => {} })
  await session.start()
  if (era === "modern") session.adopt("2026-07-28", DISCOVERY)
  else session.setTools(tools as never)
  return { session, transport }
}

const task = (fields: Record<string, unknown>) => ({ resultType: "complete", taskId: "t-1", status: "working", createdAt: "2026-01-01T00:00:00Z", lastUpdatedAt: "2026-01-01T00:00:00Z", ttlMs: 60_000, ...fields })
const created = (fields: Record<string, unknown> = {}) => ({ ...task(fields), resultType: "task" })
const done = task({ status: "completed", result: { content: [{ type: "text", text: "done" }] } })

/** The call's failure (its message), or the test fails. */
const failure = async (call: Promise<unknown>): Promise<string> => {
  try {
    await call
  } catch (e) {
    return String((e as Error).message)
  }
  throw new Error("the call did not fail")
}

/** Lets the cancellation the engine sends without waiting reach the transport. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 20))

describe("the engine follows a server's task", () => {
  it("a task id past 512 characters is a protocol error", async () => {
    const { session } = await sessionOn((r) => (r.method === "tools/call" ? created({ taskId: "x".repeat(513) }) : undefined))
    expect(await failure(session.callTool("t", {}, { timeout: 2000 }))).toMatch(/no taskId \(at most 512 characters\)/)
  })

  it("another task's answer, or an unknown status: a protocol error, and the task cancelled upstream", async () => {
    for (const [answer, words] of [
      [task({ taskId: "t-2" }), /answered with another task/],
      [task({ status: "paused" }), /unknown status "paused"/]
    ] as const) {
      const { session, transport } = await sessionOn((r) => (r.method === "tools/call" ? created({ pollIntervalMs: 1 }) : r.method === "tasks/get" ? answer : r.method === "tasks/cancel" ? { resultType: "complete" } : undefined))
      expect(await failure(session.callTool("t", {}, { timeout: 2000 }))).toMatch(words)
      await settle()
      expect(transport.sent.filter((r) => r.method === "tasks/cancel").map((r) => r.params?.["taskId"])).toEqual(["t-1"])
    }
  })

  it("a poll interval of 1 ms is taken as 25 ms", async () => {
    let polls = 0
    const { session } = await sessionOn((r) => {
      if (r.method === "tools/call") return created({ pollIntervalMs: 1 })
      if (r.method === "tasks/get") return ++polls >= 6 ? done : task({ pollIntervalMs: 1 })
      return undefined
    })
    const started = performance.now()
    const result = await session.callTool("t", {}, { timeout: 5000 })
    expect(result.content).toEqual([{ type: "text", text: "done" }])
    expect(polls).toBe(6)
    // Six waits of at least 25 ms each (the timers' own slack aside).
    expect(performance.now() - started).toBeGreaterThanOrEqual(6 * 25 - 5)
  })

  it("an input request is answered once through the caller, however often tasks/get shows it; more than 16 at once is refused", async () => {
    let polls = 0
    const asked: Array<string> = []
    const hooks: CallHooks = { relay: async (request) => (asked.push(String(request.params?.["message"])), { action: "accept", content: { ok: true } }) }
    const elicit = { method: "elicitation/create", params: { mode: "form", message: "ok?", requestedSchema: { type: "object", properties: { ok: { type: "boolean" } } } } }
    const { session, transport } = await sessionOn((r) => {
      if (r.method === "tools/call") return created({ pollIntervalMs: 1 })
      if (r.method === "tasks/update") return { resultType: "complete" }
      if (r.method === "tasks/get") return ++polls < 4 ? task({ status: "input_required", pollIntervalMs: 1, inputRequests: { "k-1": elicit } }) : done
      return undefined
    })
    await session.callTool("t", {}, { timeout: 5000 }, hooks)
    expect(asked).toEqual(["ok?"])
    const updates = transport.sent.filter((r) => r.method === "tasks/update")
    expect(updates.map((r) => r.params?.["inputResponses"])).toEqual([{ "k-1": { action: "accept", content: { ok: true } } }])

    const many = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k-${i}`, elicit]))
    const flood = await sessionOn((r) => (r.method === "tools/call" ? created({ status: "input_required", inputRequests: many }) : r.method === "tasks/cancel" ? { resultType: "complete" } : undefined))
    expect(await failure(flood.session.callTool("t", {}, { timeout: 2000 }, hooks))).toMatch(/not well formed \(at most 16 at once/)
  })

  it("a task whose state never changes times out (the task cancelled); a changing message keeps it alive, never past the total cap", async () => {
    const still = await sessionOn((r) => (r.method === "tools/call" ? created({ pollIntervalMs: 10 }) : r.method === "tasks/get" ? task({ pollIntervalMs: 10 }) : r.method === "tasks/cancel" ? { resultType: "complete" } : undefined))
    const began = performance.now()
    expect(await failure(still.session.callTool("t", {}, { timeout: 200 }))).toMatch(/timed out/)
    expect(performance.now() - began).toBeLessThan(2000)
    await settle()
    expect(still.transport.methods()).toContain("tasks/cancel")

    let n = 0
    const progress: Array<CallProgress> = []
    const busy = await sessionOn((r) => (r.method === "tools/call" ? created({ pollIntervalMs: 10 }) : r.method === "tasks/get" ? task({ pollIntervalMs: 10, statusMessage: `step ${++n}` }) : { resultType: "complete" }))
    const started = performance.now()
    // Each change restarts the 150 ms time-out; the total cap (600 ms) ends it.
    expect(await failure(busy.session.callTool("t", {}, { timeout: 150 }, { maxTotalMs: 600, onProgress: (p) => void progress.push(p) }))).toMatch(/timed out/)
    const took = performance.now() - started
    expect(took).toBeGreaterThanOrEqual(550)
    expect(took).toBeLessThan(3000)
    expect(progress.length).toBeGreaterThan(5)
    expect(progress.map((p) => p.progress)).toEqual(progress.map((_, i) => i + 1))
  })

  it("a store that stops leaves the task to the caller that follows it again; without that caller, it is cancelled", async () => {
    for (const follows of [true, false]) {
      const { session, transport } = await sessionOn((r) => (r.method === "tools/call" ? created({ pollIntervalMs: 10 }) : r.method === "tasks/get" ? task({ pollIntervalMs: 10 }) : { resultType: "complete" }))
      const cancel = new Cancel()
      const told: Array<string> = []
      const call = session.callTool("t", {}, { timeout: 5000, signal: cancel }, follows ? { onTask: (id) => void told.push(id) } : {})
      await new Promise((resolve) => setTimeout(resolve, 50))
      cancel.abort(STORE_STOPPING)
      await failure(call)
      await settle()
      expect({ follows, cancelled: transport.methods().includes("tasks/cancel") }).toEqual({ follows, cancelled: !follows })
      if (follows) expect(told).toEqual(["t-1"])
    }
  })

  it("2025-11-25: a tool that requires tasks is called with `task`, polled with tasks/get and read with tasks/result", async () => {
    const { session, transport } = await sessionOn(
      (r) => {
        if (r.method === "tools/call") return { task: { taskId: "old-1", status: "working", pollInterval: 1, createdAt: "x", lastUpdatedAt: "x", ttl: 1000 } }
        if (r.method === "tasks/get") return { taskId: "old-1", status: "completed", createdAt: "x", lastUpdatedAt: "x", ttl: 1000 }
        if (r.method === "tasks/result") return { content: [{ type: "text", text: "old done" }] }
        return undefined
      },
      "2025",
      [{ name: "t", inputSchema: { type: "object" }, execution: { taskSupport: "required" } }]
    )
    const result = await session.callTool("t", { a: 1 }, { timeout: 2000 }, { maxTotalMs: 9000 })
    expect(result.content).toEqual([{ type: "text", text: "old done" }])
    expect(transport.methods()).toEqual(["tools/call", "tasks/get", "tasks/result"])
    expect(transport.sent[0]?.params).toMatchObject({ name: "t", arguments: { a: 1 }, task: { ttl: 9000 } })
  })
})
