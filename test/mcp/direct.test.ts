// The direct requests (src/mcp/direct.ts) and the stdio transport's message reader: each reads an
// answer exactly as the SDK would (the same result, or a refusal), and a request beside the SDK's
// Client on one transport times out, is cancelled, fails on close and hands the Client its own
// messages as the SDK's Protocol would.
import { deserializeMessage } from "@modelcontextprotocol/sdk/shared/stdio.js"
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js"
import { CallToolResultSchema, ErrorCode, McpError, type JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { callToolResult, DirectRequests } from "../../src/mcp/direct.js"
import { upstreamSchemaValidator } from "../../src/mcp/json-schema.js"
import { readMessage } from "../../src/mcp/stdio.js"
import { Cancel } from "../../src/mcp/types.js"

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

/** A transport whose sent messages are kept; answers are delivered by hand. */
const fakeTransport = () => {
  const sent: JSONRPCMessage[] = []
  const toClient: JSONRPCMessage[] = []
  let closed = 0
  const transport: Transport = {
    start: async () => {},
    close: async () => {},
    send: async (message) => void sent.push(message)
  }
  // What the SDK's Protocol installs on connect.
  transport.onmessage = (message) => void toClient.push(message)
  transport.onclose = () => void closed++
  return { transport, sent, toClient, closed: () => closed }
}

const idOf = (message: JSONRPCMessage) => (message as { id: string }).id

describe("direct requests beside the Client", () => {
  it("sends tools/call, takes its own answer and leaves every other message to the Client", async () => {
    const t = fakeTransport()
    const direct = new DirectRequests(t.transport, upstreamSchemaValidator)
    const call = direct.callTool("echo", { text: "hi" }, 1_000, undefined)
    expect(t.sent).toHaveLength(1)
    expect(t.sent[0]).toMatchObject({ jsonrpc: "2.0", method: "tools/call", params: { name: "echo", arguments: { text: "hi" } } })
    const id = idOf(t.sent[0]!)
    t.transport.onmessage?.({ jsonrpc: "2.0", id: 0, result: {} })
    t.transport.onmessage?.({ jsonrpc: "2.0", method: "notifications/tools/list_changed" })
    t.transport.onmessage?.({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text: "hi" }] } })
    await expect(call).resolves.toEqual({ content: [{ type: "text", text: "hi" }] })
    expect(t.toClient).toEqual([{ jsonrpc: "2.0", id: 0, result: {} }, { jsonrpc: "2.0", method: "notifications/tools/list_changed" }])
  })

  it("answers a JSON-RPC error with the McpError the SDK would throw", async () => {
    const t = fakeTransport()
    const direct = new DirectRequests(t.transport, upstreamSchemaValidator)
    const call = direct.callTool("echo", {}, 1_000, undefined)
    t.transport.onmessage?.({ jsonrpc: "2.0", id: idOf(t.sent[0]!), error: { code: -32602, message: "bad", data: { a: 1 } } })
    const error = await call.catch((e: unknown) => e)
    expect(error).toBeInstanceOf(McpError)
    expect(error).toMatchObject({ code: -32602, data: { a: 1 }, message: "MCP error -32602: bad" })
  })

  it("times out as the SDK does: notifications/cancelled, then RequestTimeout; a late answer is dropped", async () => {
    const t = fakeTransport()
    const direct = new DirectRequests(t.transport, upstreamSchemaValidator)
    const error = await direct.ping(20, undefined).catch((e: unknown) => e)
    expect(error).toMatchObject({ code: ErrorCode.RequestTimeout })
    const id = idOf(t.sent[0]!)
    expect(t.sent[1]).toEqual({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: id, reason: "Request timed out" } })
    t.transport.onmessage?.({ jsonrpc: "2.0", id, result: {} })
    expect(t.toClient).toEqual([])
  })

  it("is cancelled by the caller's signal, with its reason", async () => {
    const t = fakeTransport()
    const direct = new DirectRequests(t.transport, upstreamSchemaValidator)
    const controller = new AbortController()
    const call = direct.callTool("sleep", {}, 10_000, controller.signal)
    controller.abort(new Error("gone"))
    await expect(call).rejects.toThrow("gone")
    expect(t.sent[1]).toMatchObject({ method: "notifications/cancelled", params: { requestId: idOf(t.sent[0]!) } })
  })

  it("is cancelled by a Cancel as by an AbortSignal, with an AbortError as the reason", async () => {
    const t = fakeTransport()
    const direct = new DirectRequests(t.transport, upstreamSchemaValidator)
    const cancel = new Cancel()
    const call = direct.callTool("sleep", {}, 10_000, cancel)
    cancel.abort()
    cancel.abort()
    const error = await call.catch((e: unknown) => e)
    expect(error).toMatchObject({ name: "AbortError" })
    expect(t.sent.slice(1)).toEqual([
      { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: idOf(t.sent[0]!), reason: "AbortError: This operation was aborted" } }
    ])
    await expect(direct.callTool("sleep", {}, 10_000, cancel)).rejects.toMatchObject({ name: "AbortError" })
  })

  it("fails every request in flight when the transport closes, and tells the Client", async () => {
    const t = fakeTransport()
    const direct = new DirectRequests(t.transport, upstreamSchemaValidator)
    const calls = [direct.callTool("a", {}, 10_000, undefined), direct.ping(10_000, undefined)]
    t.transport.onclose?.()
    for (const call of calls) await expect(call).rejects.toMatchObject({ code: ErrorCode.ConnectionClosed, message: "MCP error -32000: Connection closed" })
    expect(t.closed()).toBe(1)
  })

  it("checks structured content against a tool's output schema, and refuses a task-only tool", async () => {
    const t = fakeTransport()
    const direct = new DirectRequests(t.transport, upstreamSchemaValidator)
    direct.setTools([
      { name: "add", outputSchema: { type: "object", properties: { sum: { type: "number" } }, required: ["sum"] } },
      { name: "job", taskSupport: "required" }
    ])
    const answer = async (result: unknown) => {
      const call = direct.callTool("add", {}, 1_000, undefined)
      t.transport.onmessage?.({ jsonrpc: "2.0", id: idOf(t.sent.at(-1)!), result } as JSONRPCMessage)
      return call.catch((e: unknown) => e)
    }
    expect(await answer({ content: [], structuredContent: { sum: 1 } })).toEqual({ content: [], structuredContent: { sum: 1 } })
    expect(await answer({ content: [], structuredContent: { sum: "x" } })).toMatchObject({ code: ErrorCode.InvalidParams })
    expect(await answer({ content: [{ type: "text", text: "1" }] })).toMatchObject({ code: ErrorCode.InvalidRequest })
    expect(await answer({ content: [{ type: "text", text: "no" }], isError: true })).toMatchObject({ isError: true })
    await expect(direct.callTool("job", {}, 1_000, undefined)).rejects.toMatchObject({ code: ErrorCode.InvalidRequest })
  })
})
