// The 2026-07-28 tools/call that the store answers on its own path (src/http/gateway/modern.ts,
// `serveCall`), over raw HTTP: a plain call is answered byte for byte as the SDK's handler answers
// the same call (sent with its Mcp-Name as a Base64 sentinel, which only the handler serves):
// `resultType`, the server's identity in `_meta` per scope, the id echoed, the store's refusals as
// the tool's failure, progress and log messages on an event stream that the answer ends; calls
// that are not plain (other params, invalid arguments, a client that takes part in input rounds)
// are still the handler's; a call in flight when the store shuts down is cancelled upstream.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { demoServer, eraStdio } from "../fixtures/paths.js"
import { addService, eventually, localService, startTestServer, waitStatus, within, type TestServer } from "../support/index.js"

const MODERN = "2026-07-28"
const AGENT = "agent-calls"

let fixture: HttpFixture
let server: TestServer

beforeAll(async () => {
  fixture = await startHttpFixture({ server: { progressTool: true, structuredTool: true } })
  server = await startTestServer({})
  for (const [prefix, def] of [
    ["/for_store", { name: "fx", url: fixture.url }],
    ["/for_store", localService("demo", demoServer)],
    ["/for_store", localService("era", eraStdio("reject"))],
    [`/for_agent/${AGENT}`, { name: "fx", url: fixture.url }]
  ] as const) {
    const r = await addService(server, prefix, def)
    expect(r.status, r.text).toBe(200)
  }
  for (const name of ["fx", "demo", "era"]) await waitStatus(server, "/for_store", name, "healthy", 30)
  await waitStatus(server, `/for_agent/${AGENT}`, "fx", "healthy", 30)
}, 60_000)
afterAll(async () => {
  await server?.cleanup()
  await fixture?.stop()
})

const envelope = (capabilities: Record<string, unknown> = {}) => ({
  "io.modelcontextprotocol/protocolVersion": MODERN,
  "io.modelcontextprotocol/clientInfo": { name: "raw-calls", version: "1.0.0" },
  "io.modelcontextprotocol/clientCapabilities": capabilities
})

interface CallOptions {
  readonly path?: string
  readonly id?: string | number
  readonly arguments?: unknown
  /** More `_meta` beside the envelope. */
  readonly meta?: Record<string, unknown>
  readonly capabilities?: Record<string, unknown>
  /** More params beside name, arguments and `_meta`. */
  readonly params?: Record<string, unknown>
  /** Send Mcp-Name as a Base64 sentinel (valid: only the SDK's handler serves it). */
  readonly base64Name?: boolean
}

/** One tools/call over raw HTTP: status, headers, the raw text and the JSON-RPC messages (one, or an event stream's). */
const call = async (name: string, options: CallOptions = {}) => {
  const res = await fetch(server.url + (options.path ?? "/mcp"), {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": MODERN,
      "mcp-method": "tools/call",
      "mcp-name": options.base64Name === true ? `=?base64?${Buffer.from(name).toString("base64")}?=` : name
    },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: options.id ?? 1,
      method: "tools/call",
      params: { name, arguments: options.arguments ?? {}, ...options.params, _meta: { ...envelope(options.capabilities), ...options.meta } }
    })
  })
  const text = await res.text()
  const stream = (res.headers.get("content-type") ?? "").startsWith("text/event-stream")
  const messages = stream
    ? text
        .split("\n")
        .filter((l) => l.startsWith("data:"))
        .map((l) => JSON.parse(l.slice(5)) as Record<string, unknown>)
    : [JSON.parse(text) as Record<string, unknown>]
  return { status: res.status, headers: res.headers, text, stream, messages, last: messages.at(-1)! }
}

describe("a plain 2026-07-28 tools/call", () => {
  it("is answered as the SDK's handler answers the same call: resultType, the server's identity per scope, the id echoed, refusals as the tool's failure", async () => {
    const cases: Array<[string, CallOptions]> = [
      ["fx__echo", { arguments: { text: "hi" }, id: 0 }],
      ["fx__echo", { arguments: { text: "hi" }, id: "s-1" }],
      ["fx__sum", { arguments: { a: 2, b: 3 } }],
      ["fx__nope", {}],
      ["demo__add", { arguments: { a: 1 } }],
      ["fx__echo", { arguments: { text: "agent" }, path: `/for_agent/${AGENT}/mcp` }],
      ["era__add", { arguments: { a: 4, b: 5 } }]
    ]
    for (const [name, options] of cases) {
      const own = await call(name, options)
      const sdk = await call(name, { ...options, base64Name: true })
      expect(own.status, name).toBe(200)
      expect(own.headers.get("content-type")).toBe("application/json")
      // The store's own path writes a JSON answer with its length; the SDK's handler, in chunks.
      expect(own.headers.get("content-length"), name).toBe(String(Buffer.byteLength(own.text)))
      expect(sdk.headers.get("content-length"), name).toBeNull()
      expect(own.text, name).toBe(sdk.text)
    }
    const echo = await call("fx__echo", { arguments: { text: "hi" }, id: 0 })
    expect(echo.last).toEqual({
      result: { content: [{ type: "text", text: "hi" }], resultType: "complete", _meta: { "io.modelcontextprotocol/serverInfo": { name: "mcp-store", version: expect.any(String) } } },
      jsonrpc: "2.0",
      id: 0
    })
    const agent = await call("fx__echo", { arguments: { text: "x" }, path: `/for_agent/${AGENT}/mcp` })
    expect((agent.last["result"] as { _meta: Record<string, { name: string }> })._meta["io.modelcontextprotocol/serverInfo"]!.name).toBe(`mcp-store/${AGENT}`)
    const unknown = await call("fx__nope")
    expect(unknown.last["result"]).toMatchObject({ isError: true, resultType: "complete" })
    const structured = await call("era__add", { arguments: { a: 4, b: 5 } })
    expect(structured.last["result"]).toMatchObject({ structuredContent: { sum: 9 }, resultType: "complete" })
  })

  it("with a progress token: an event stream of the upstream's progress, ended by the result, as the SDK's handler streams it", async () => {
    for (const base64Name of [false, true]) {
      const r = await call("fx__progress", { arguments: { count: 3 }, meta: { progressToken: "tok" }, base64Name })
      expect(r.status).toBe(200)
      expect(r.stream).toBe(true)
      expect(r.headers.get("cache-control")).toBe("no-cache, no-transform")
      const progress = r.messages.filter((m) => m["method"] === "notifications/progress")
      expect(progress.length).toBeGreaterThan(0)
      for (const p of progress) expect(p).toMatchObject({ jsonrpc: "2.0", params: { progressToken: "tok", total: 3 } })
      expect((progress.at(-1)!["params"] as { progress: number }).progress).toBe(3)
      expect(r.last).toMatchObject({ jsonrpc: "2.0", id: 1, result: { content: [{ type: "text", text: "sent 3 progress notifications" }], resultType: "complete" } })
      expect(r.text.split("\n\n").filter((f) => f !== "").every((f) => f.startsWith("event: message\ndata: "))).toBe(true)
    }
  })

  it("with a log level in its envelope: the called service's log messages on the request's stream, then the result", async () => {
    const r = await call("era__say", { arguments: { text: "heard" }, meta: { "io.modelcontextprotocol/logLevel": "info" } })
    expect(r.stream).toBe(true)
    expect(r.messages.some((m) => m["method"] === "notifications/message" && JSON.stringify(m["params"]).includes("heard"))).toBe(true)
    expect(r.last).toMatchObject({ id: 1, result: { resultType: "complete" } })
    const quiet = await call("era__say", { arguments: { text: "unheard" } })
    expect(quiet.stream).toBe(false)
    expect(quiet.headers.get("content-length")).not.toBeNull()
  })

  it("a call that is not plain is the SDK handler's: invalid arguments (-32602), params beside name and arguments, a client that answers input in rounds", async () => {
    const invalid = await call("fx__echo", { arguments: [1] })
    expect(invalid.last).toMatchObject({ id: 1, error: { code: -32602 } })
    expect(String((invalid.last["error"] as { message: string }).message)).toContain("Invalid tools/call request")
    const extra = await call("fx__echo", { arguments: { text: "x" }, params: { other: 1 } })
    expect(extra.headers.get("content-length")).toBeNull()
    expect(extra.last).toMatchObject({ result: { content: [{ type: "text", text: "x" }], resultType: "complete" } })
    const rounds = await call("era__confirm", { capabilities: { elicitation: {} } })
    expect(rounds.headers.get("content-length")).toBeNull()
    expect(rounds.last).toMatchObject({ result: { resultType: "input_required" } })
  })
})

describe("a plain 2026-07-28 tools/call in flight at shutdown", () => {
  it("is cancelled upstream and its response ends", async () => {
    const own = await startTestServer({})
    try {
      expect((await addService(own, "/for_store", { name: "fx", url: fixture.url })).status).toBe(200)
      await waitStatus(own, "/for_store", "fx", "healthy", 30)
      const before = fixture.requests().filter((r) => r === "POST notifications/cancelled").length
      const sent = fixture.requests().filter((r) => r === "POST tools/call").length
      const pending = fetch(own.url + "/mcp", {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": "fx__sleep" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "fx__sleep", arguments: { ms: 60_000 }, _meta: envelope() } })
      }).then(
        async (res) => ({ status: res.status, text: await res.text().catch(() => "") }),
        (e: unknown) => e
      )
      // Shut down once the upstream has the call (a call stopped before it is sent has nothing to cancel upstream).
      expect(await eventually(() => own.running.store.inFlightCalls === 1 && fixture.requests().filter((r) => r === "POST tools/call").length > sent, 10_000)).toBe(true)
      await within(own.close(), 15_000, "the store's shutdown")
      const ended = await within(pending, 5_000, "the call's response")
      // The exchange was closed before an answer: no result (the connection ends, or 499 as the SDK's handler answers).
      if (!(ended instanceof Error)) expect((ended as { text: string }).text).not.toContain('"result"')
      const cancels = () => fixture.requests().filter((r) => r === "POST notifications/cancelled").length - before
      await eventually(() => cancels() > 0, 5_000)
      expect(cancels(), JSON.stringify(fixture.requests().slice(-8))).toBe(1)
    } finally {
      await own.cleanup()
    }
  }, 60_000)
})
