// mcpRequest and its classification, on the errors the engine, its transports and fetch really throw.
import { SseError } from "@modelcontextprotocol/client"
import { describe, expect, it } from "vitest"
import { z } from "zod"
import { classifyFailure, describeError, mcpRequest } from "../../src/mcp/request.js"
import { connectionClosed, mcpError, requestTimedOut } from "../../src/mcp/protocol-error.js"
import { McpRequestError, StreamableHttpError } from "../../src/mcp/types.js"

const options = { timeoutMs: 1_000 }
const classify = (error: unknown) => classifyFailure("tools/call", error, options)

describe("classifyFailure", () => {
  it("maps the engine's time-out to timeout", () => {
    const error = classify(requestTimedOut(1_000))
    expect(error.kind).toBe("timeout")
    expect(error.message).toBe("tools/call: no answer within 1000 ms")
  })

  it("maps the engine's closed connection to transport, but a server's own -32000 answer to protocol", () => {
    expect(classify(connectionClosed("Connection closed")).kind).toBe("transport")
    expect(classify(connectionClosed("Request was cancelled")).kind).toBe("transport")
    const server = classify(mcpError(-32000, "Database unavailable", { retry: true }))
    expect([server.kind, server.code, server.data]).toEqual(["protocol", -32000, { retry: true }])
    // Even in the words of a closed connection: only the engine's own SdkError is one.
    expect(classify(mcpError(-32000, "Connection closed")).kind).toBe("protocol")
  })

  it("maps other JSON-RPC errors to protocol, keeping code and data", () => {
    const error = classify(mcpError(-32602, "Invalid arguments", { field: "a" }))
    expect(error).toMatchObject({ kind: "protocol", code: -32602, data: { field: "a" } })
    expect(error.message).toBe("tools/call: the server answered with error -32602: Invalid arguments")
  })

  it("maps Streamable HTTP 404 to session_expired and other statuses to transport", () => {
    expect(classify(new StreamableHttpError(404, "Error POSTing to endpoint: Session not found")).kind).toBe("session_expired")
    const error = classify(new StreamableHttpError(502, "Error POSTing to endpoint: Bad Gateway"))
    expect(error.kind).toBe("transport")
    expect(error.message).toMatch(/HTTP 502.*Bad Gateway/)
    expect(classify(new SseError(500, "boom", new Event("error") as ConstructorParameters<typeof SseError>[2])).kind).toBe("transport")
  })

  it("maps fetch failures to transport with the cause in the message", () => {
    const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:9"), { code: "ECONNREFUSED" })
    const error = classify(new TypeError("fetch failed", { cause: refused }))
    expect(error.kind).toBe("transport")
    expect(error.message).toBe("tools/call: fetch failed: connect ECONNREFUSED 127.0.0.1:9")
    const hangUp = Object.assign(new Error("socket hang up"), { code: "ECONNRESET" })
    expect(classify(hangUp).message).toBe("tools/call: socket hang up (ECONNRESET)")
  })

  it("describes every address of a happy-eyeballs failure", () => {
    const one = Object.assign(new Error("connect ECONNREFUSED ::1:9"), { code: "ECONNREFUSED" })
    const two = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:9"), { code: "ECONNREFUSED" })
    const text = describeError(new TypeError("fetch failed", { cause: new AggregateError([one, two]) }))
    expect(text).toBe("fetch failed: connect ECONNREFUSED ::1:9; connect ECONNREFUSED 127.0.0.1:9")
  })

  it("maps an answer that does not fit the schema to protocol", () => {
    const parsed = z.object({ tools: z.array(z.string()) }).safeParse({ tools: 1 })
    expect(parsed.success).toBe(false)
    expect(classify(parsed.error).kind).toBe("protocol")
  })

  it("keeps an McpRequestError as it is, and any other error is transport", () => {
    const own = new McpRequestError("protocol", "x", 1)
    expect(classify(own)).toBe(own)
    expect(classify(new Error("Not connected")).kind).toBe("transport")
    expect(classify("weird").message).toBe("tools/call: weird")
  })

  it("says aborted whenever the caller's signal fired, whatever the SDK threw", () => {
    const controller = new AbortController()
    controller.abort(new Error("shutting down"))
    const error = classifyFailure("ping", requestTimedOut(1_000), {
      timeoutMs: 1_000,
      signal: controller.signal
    })
    expect(error.kind).toBe("aborted")
    expect(error.message).toBe("ping: aborted by the caller: shutting down")
  })
})

describe("mcpRequest", () => {
  it("passes the time-out and a live signal, and returns the result", async () => {
    const result = await mcpRequest(
      "ping",
      async ({ timeout, signal }) => {
        expect(timeout).toBe(1_000)
        expect(signal.aborted).toBe(false)
        return 42
      },
      options
    )
    expect(result).toBe(42)
  })

  it("settles at the time-out even when the work never does, and aborts the signal it gave", async () => {
    let given: AbortSignal | undefined
    const started = performance.now()
    const error = await mcpRequest(
      "connect",
      ({ signal }) => {
        given = signal
        return new Promise<never>(() => {})
      },
      { timeoutMs: 200 }
    ).catch((e: unknown) => e)
    expect(error).toMatchObject({ kind: "timeout", message: "connect: no answer within 200 ms" })
    expect(performance.now() - started).toBeLessThan(600)
    expect(given?.aborted).toBe(true)
  })

  it("settles at once when the caller aborts, and passes the abort on", async () => {
    const controller = new AbortController()
    let given: AbortSignal | undefined
    const error = await mcpRequest(
      "tools/call",
      ({ signal }) => {
        given = signal
        // The caller gives up once the request is under way.
        queueMicrotask(() => controller.abort())
        return new Promise<never>(() => {})
      },
      { timeoutMs: 5_000, signal: controller.signal }
    ).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(McpRequestError)
    expect((error as McpRequestError).kind).toBe("aborted")
    expect(given?.aborted).toBe(true)
  })

  it("does not run at all when the signal is already aborted", async () => {
    let ran = false
    const error = await mcpRequest(
      "ping",
      async () => {
        ran = true
      },
      { timeoutMs: 1_000, signal: AbortSignal.abort() }
    ).catch((e: unknown) => e)
    expect((error as McpRequestError).kind).toBe("aborted")
    expect(ran).toBe(false)
  })
})
