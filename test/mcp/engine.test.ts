// The one protocol engine of an upstream connection (src/mcp/session.ts): a tool result is read
// exactly as SDK 1.x's CallToolResultSchema read it (structured content an object), a stdio message
// as SDK v2's deserializeMessage reads it (the same value, or a refusal), and
// against a real server a call's cancellation and time-out reach the upstream as
// notifications/cancelled, each progress restarts the time-out, never past the call's total cap.
import { deserializeMessage } from "@modelcontextprotocol/client"
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js"
import { getEventListeners } from "node:events"
import fc from "fast-check"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { connect } from "../../src/mcp/connect.js"
import { callToolResult } from "../../src/mcp/session.js"
import { readMessage } from "../../src/mcp/stdio.js"
import { type CallProgress, type McpConnection } from "../../src/mcp/types.js"
import { Cancel } from "../../src/domain/cancellation.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { eventually, failureOf, remoteDef, T, textOf } from "../support/index.js"

/** What a reader gives: its value, or that it refused. */
const outcome = (read: () => unknown): unknown => {
  try {
    return { value: read() }
  } catch {
    return "refused"
  }
}

const RESULTS: ReadonlyArray<unknown> = [
  { content: [{ type: "text", text: "hi" }] },
  { content: [] },
  {},
  { content: [{ type: "text", text: "a" }, { type: "text", text: "b" }], isError: true },
  { content: [{ type: "text", text: "42" }], structuredContent: { sum: 42 } },
  { structuredContent: { nested: { a: [1, 2] } } },
  { content: [{ type: "text", text: "x", annotations: { priority: 1 } }] },
  { content: [{ type: "text", text: "x", extra: 1 }] },
  { content: [{ type: "image", data: "aGk=", mimeType: "image/png" }] },
  { content: [{ type: "image", data: "not base64!", mimeType: "image/png" }] },
  { content: [{ type: "resource", resource: { uri: "file:///a", text: "t" } }] },
  { content: [{ type: "resource_link", uri: "file:///a", name: "a" }] },
  { content: [{ type: "video" }] },
  { content: [{ type: "text" }] },
  { content: [{ type: "text", text: 5 }] },
  { content: "hi" },
  { content: [null] },
  { content: [{ type: "text", text: "x" }], isError: "yes" },
  { content: [{ type: "text", text: "x" }], structuredContent: [1] },
  { content: [{ type: "text", text: "x" }], structuredContent: null },
  { content: [{ type: "text", text: "x" }], _meta: { a: 1 } },
  { content: [{ type: "text", text: "x" }], _meta: 5 },
  { content: [{ type: "text", text: "x" }], toolResult: 1 },
  [],
  null,
  "text",
  5
]

const LINES: ReadonlyArray<string> = [
  '{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hi"}]}}',
  '{"jsonrpc":"2.0","id":"mcp-store:7","result":{}}',
  '{"jsonrpc":"2.0","id":1.5,"result":{}}',
  '{"jsonrpc":"2.0","id":null,"result":{}}',
  '{"jsonrpc":"2.0","id":1,"result":{"_meta":{"x":1}}}',
  '{"jsonrpc":"2.0","id":1,"result":{"_meta":5}}',
  '{"jsonrpc":"2.0","id":1,"result":{"content":[],"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":"1"}}}}',
  '{"jsonrpc":"2.0","id":1,"result":{"_meta":{"progressToken":"t"}}}',
  '{"jsonrpc":"2.0","id":1,"result":{"_meta":{"progressToken":7}}}',
  '{"jsonrpc":"2.0","id":1,"result":{"_meta":{"progressToken":{"x":1}}}}',
  '{"jsonrpc":"2.0","id":1,"result":{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"a"}}}}',
  '{"jsonrpc":"2.0","id":1,"result":{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":5}}}}',
  '{"jsonrpc":"2.0","id":1,"result":{"_meta":{"__proto__":{"polluted":true},"a":1}}}',
  '{"jsonrpc":"2.0","id":1,"result":{"_meta":[]}}',
  '{"jsonrpc":"2.0","id":1,"result":{"_meta":null}}',
  '{"jsonrpc":"2.0","id":1,"result":[]}',
  '{"jsonrpc":"2.0","id":1,"result":5}',
  '{"jsonrpc":"2.0","id":1,"result":{},"extra":1}',
  '{"jsonrpc":"1.0","id":1,"result":{}}',
  '{"id":1,"result":{}}',
  '{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}',
  '{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}',
  '{"jsonrpc":"2.0","id":3,"method":"ping"}',
  '{"jsonrpc":"2.0"}',
  "[]",
  "5",
  "not json"
]

describe("reading answers as the SDK reads them", () => {
  it("callToolResult gives what CallToolResultSchema gives, or refuses what it refuses", () => {
    for (const result of RESULTS) {
      expect(outcome(() => callToolResult(result)), JSON.stringify(result)).toEqual(outcome(() => CallToolResultSchema.parse(result)))
    }
  })

  it("callToolResult reads an own __proto__ key in structured content as the schema does", () => {
    const r = JSON.parse('{"structuredContent":{"__proto__":{"polluted":true},"a":1}}')
    expect(callToolResult(r)).toEqual(CallToolResultSchema.parse(r))
    expect(({} as Record<string, unknown>)["polluted"]).toBeUndefined()
  })

  it("callToolResult agrees with CallToolResultSchema on arbitrary JSON", () => {
    const block = fc.oneof(
      fc.record({ type: fc.constant("text"), text: fc.string() }),
      fc.record({ type: fc.constantFrom("text", "image", "x"), text: fc.jsonValue() }, { requiredKeys: [] }),
      fc.jsonValue()
    )
    const result = fc.oneof(
      fc.record(
        { content: fc.oneof(fc.array(block, { maxLength: 3 }), fc.jsonValue()), structuredContent: fc.oneof(fc.dictionary(fc.string(), fc.jsonValue()), fc.jsonValue()), isError: fc.oneof(fc.boolean(), fc.jsonValue()) },
        { requiredKeys: [] }
      ),
      fc.jsonValue()
    )
    fc.assert(
      fc.property(result, (r) => {
        expect(outcome(() => callToolResult(r))).toEqual(outcome(() => CallToolResultSchema.parse(r)))
      }),
      { numRuns: 2000 }
    )
  })

  it("the stdio reader gives what deserializeMessage gives, or refuses what it refuses", () => {
    for (const line of LINES) expect(outcome(() => readMessage(line)), line).toEqual(outcome(() => deserializeMessage(line)))
  })
})

describe("tools/call on the session's engine, against the HTTP fixture", () => {
  let fixture: HttpFixture
  let conn: McpConnection
  const cancelled = () => fixture.requests().filter((r) => r === "POST notifications/cancelled").length
  const calls = () => fixture.requests().filter((r) => r === "POST tools/call").length

  beforeAll(async () => {
    fixture = await startHttpFixture({ server: { progressTool: true } })
    conn = await connect(remoteDef(fixture.url), T)
    await conn.listTools(T)
  })
  afterAll(async () => {
    await conn.close()
    await fixture.stop()
  })

  it("a caller's Cancel reaches the upstream as notifications/cancelled, and the call fails aborted", async () => {
    const before = cancelled()
    const sent = calls()
    const cancel = new Cancel()
    const call = failureOf(conn.callTool("sleep", { ms: 30_000 }, { timeoutMs: 30_000, signal: cancel }))
    expect(await eventually(() => calls() === sent + 1, 5_000)).toBe(true)
    cancel.abort()
    expect((await call).kind).toBe("aborted")
    expect(await eventually(() => cancelled() === before + 1, 5_000)).toBe(true)
    // The connection goes on.
    expect(textOf(await conn.callTool("echo", { text: "after" }, T))).toBe("after")
  })

  it("an AbortSignal does the same, and keeps no listener of the call once it has settled", async () => {
    const before = cancelled()
    const controller = new AbortController()
    // A long-lived signal: many calls settle on it; none may leave a listener behind.
    for (let i = 0; i < 20; i++) await conn.callTool("echo", { text: String(i) }, { ...T, signal: controller.signal })
    expect(getEventListeners(controller.signal, "abort")).toHaveLength(0)
    const call = failureOf(conn.callTool("sleep", { ms: 30_000 }, { timeoutMs: 30_000, signal: controller.signal }))
    controller.abort(new Error("gone"))
    const failure = await call
    expect([failure.kind, failure.message]).toEqual(["aborted", `tools/call "sleep": aborted by the caller: gone`])
    expect(await eventually(() => cancelled() === before + 1, 5_000)).toBe(true)
  })

  it("a close with a call in flight tells the upstream (notifications/cancelled) before the connection goes, and fails the call as closed", async () => {
    const own = await connect(remoteDef(fixture.url), T)
    const before = cancelled()
    const sent = calls()
    const call = failureOf(own.callTool("sleep", { ms: 30_000 }, { timeoutMs: 30_000 }))
    expect(await eventually(() => calls() === sent + 1, 5_000)).toBe(true)
    await own.close()
    expect((await call).kind).toBe("transport")
    // Received before the close returned: the close let it leave first, before the session's DELETE.
    expect(cancelled()).toBe(before + 1)
  })

  it("a time-out fails the call as timeout and reaches the upstream as notifications/cancelled", async () => {
    const before = cancelled()
    const failure = await failureOf(conn.callTool("sleep", { ms: 30_000 }, { timeoutMs: 300 }))
    expect(failure.kind).toBe("timeout")
    expect(await eventually(() => cancelled() === before + 1, 5_000)).toBe(true)
  })

  it("each progress restarts the time-out: a call longer than its time-out lives on its progress", async () => {
    const seen: Array<CallProgress> = []
    // 25 progress 100 ms apart: 2.5 s against a 2 s time-out. The last one, read with the answer, is heard too.
    const result = await conn.callTool("progress", { count: 25, every: 100 }, { timeoutMs: 2_000, hooks: { onProgress: (p) => void seen.push(p), maxTotalMs: 60_000 } })
    expect(textOf(result)).toBe("sent 25 progress notifications")
    expect(seen.map((p) => p.progress)).toEqual(Array.from({ length: 25 }, (_, i) => i + 1))
    expect(seen[0]).toEqual({ progress: 1, total: 25 })
  })

  it("progress never carries a call past maxTotalMs: it is cancelled there as on a time-out", async () => {
    const before = cancelled()
    const seen: Array<CallProgress> = []
    const failure = await failureOf(conn.callTool("progress", { count: 200, every: 50 }, { timeoutMs: 1_000, hooks: { onProgress: (p) => void seen.push(p), maxTotalMs: 1_500 } }))
    expect(failure.kind).toBe("timeout")
    expect(seen.length).toBeGreaterThan(0)
    expect(seen.length).toBeLessThan(200)
    expect(await eventually(() => cancelled() === before + 1, 5_000)).toBe(true)
  })
})
