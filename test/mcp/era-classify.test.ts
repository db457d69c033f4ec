// The era probe's verdicts (src/mcp/era.ts), as the spec's backward-compatibility rules and the SDK
// v2 client's 'auto' negotiation decide them, per transport.
import { describe, expect, it } from "vitest"
import { classifyProbe, mismatchHint } from "../../src/mcp/era.js"

const discover = (supportedVersions: ReadonlyArray<string>) => ({ kind: "result", result: { resultType: "complete", supportedVersions, capabilities: { tools: {} } } }) as const
const refused = (supported: ReadonlyArray<string>) => ({ kind: "rpc_error", code: -32022, message: "Unsupported protocol version", data: { supported, requested: "2026-07-28" } }) as const

describe("classifyProbe", () => {
  it("a discovery result offering 2026-07-28 is a modern server", () => {
    const verdict = classifyProbe(discover(["2026-07-28", "2025-11-25"]), "http")
    expect(verdict).toMatchObject({ kind: "modern", version: "2026-07-28", discover: { supportedVersions: ["2026-07-28", "2025-11-25"] } })
  })

  it("a discovery result without 2026-07-28: a 2025 fallback when it lists one, else a mismatch", () => {
    expect(classifyProbe(discover(["2025-06-18"]), "stdio")).toEqual({ kind: "legacy" })
    expect(classifyProbe(discover(["2027-01-01"]), "stdio")).toEqual({ kind: "mismatch", supported: ["2027-01-01"] })
  })

  it("-32022 with a modern list is modern evidence (a mismatch here: the probe asked the one revision the store speaks)", () => {
    expect(classifyProbe(refused(["2027-01-01"]), "http")).toEqual({ kind: "mismatch", supported: ["2027-01-01"] })
    expect(classifyProbe(refused(["2025-11-25"]), "http")).toEqual({ kind: "legacy" })
    expect(classifyProbe({ kind: "rpc_error", code: -32022, message: "x" }, "http")).toEqual({ kind: "legacy" })
  })

  it("any other JSON-RPC error, or a 4xx without one, is a 2025-era server", () => {
    expect(classifyProbe({ kind: "rpc_error", code: -32601, message: "Method not found" }, "stdio")).toEqual({ kind: "legacy" })
    expect(classifyProbe({ kind: "rpc_error", code: -32020, message: "Header mismatch" }, "http")).toEqual({ kind: "legacy" })
    expect(classifyProbe({ kind: "http_error", status: 400, body: '{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request: Server not initialized"}}' }, "http")).toEqual({ kind: "legacy" })
    expect(classifyProbe({ kind: "http_error", status: 405, body: "" }, "http")).toEqual({ kind: "legacy" })
    expect(classifyProbe({ kind: "result", result: {} }, "stdio")).toEqual({ kind: "legacy" })
  })

  it("what says nothing of the era: an authorization wall, a server failure, an HTTP server that does not answer", () => {
    for (const status of [401, 403, 500, 503]) expect(classifyProbe({ kind: "http_error", status, body: undefined }, "http")).toEqual({ kind: "inconclusive" })
    expect(classifyProbe({ kind: "timeout" }, "http")).toEqual({ kind: "inconclusive" })
    expect(classifyProbe({ kind: "closed" }, "http")).toEqual({ kind: "inconclusive" })
  })

  it("on stdio, silence or an exit is a 2025-era server", () => {
    expect(classifyProbe({ kind: "timeout" }, "stdio")).toEqual({ kind: "legacy" })
    expect(classifyProbe({ kind: "closed" }, "stdio")).toEqual({ kind: "legacy" })
  })
})

describe("mismatchHint", () => {
  it("names both sides, and what to pin when they share one", () => {
    expect(mismatchHint(["2026-07-28"], "2025-06-18")).toBe(
      `the server speaks MCP 2026-07-28; the definition pins "protocol_version": "2025-06-18": pin one of "2026-07-28" or drop "protocol_version"`
    )
    expect(mismatchHint(["2027-01-01"], undefined)).toMatch(/the server speaks MCP 2027-01-01; mcp-store speaks 2026-07-28 and 2025-11-25, .*no revision in common/)
  })
})
