// The x-mcp-header annotations of a tool's input schema (src/mcp/param-headers.ts): what is mirrored
// into Mcp-Param headers, and what makes a tool invalid (left out of the list).
import { describe, expect, it } from "vitest"
import { paramHeadersOf, paramHeaderText, valueAt } from "../../src/mcp/param-headers.js"
import { headerValue } from "../../src/mcp/http-transport.js"

describe("paramHeadersOf", () => {
  it("finds annotations reachable through properties, nested ones too", () => {
    const schema = {
      type: "object",
      properties: {
        region: { type: "string", "x-mcp-header": "Region" },
        opts: { type: "object", properties: { dry: { type: "boolean", "x-mcp-header": "Dry-Run" }, n: { type: "integer", "x-mcp-header": "N" } } },
        q: { type: "string" }
      }
    }
    expect(paramHeadersOf(schema)).toEqual({
      headers: [
        { name: "Region", path: ["region"] },
        { name: "Dry-Run", path: ["opts", "dry"] },
        { name: "N", path: ["opts", "n"] }
      ]
    })
    expect(paramHeadersOf({ type: "object" })).toEqual({ headers: [] })
  })

  it("refuses what the spec forbids", () => {
    const one = (prop: Record<string, unknown>) => paramHeadersOf({ type: "object", properties: { p: prop } })
    expect(one({ type: "number", "x-mcp-header": "P" })).toHaveProperty("invalid")
    expect(one({ type: "string", "x-mcp-header": "" })).toHaveProperty("invalid")
    expect(one({ type: "string", "x-mcp-header": "a b" })).toHaveProperty("invalid")
    expect(one({ type: "string", "x-mcp-header": "A\r\nB" })).toHaveProperty("invalid")
    expect(paramHeadersOf({ type: "object", properties: { a: { type: "string", "x-mcp-header": "X" }, b: { type: "string", "x-mcp-header": "x" } } })).toHaveProperty("invalid")
    expect(paramHeadersOf({ type: "object", properties: { a: { type: "array", items: { type: "string", "x-mcp-header": "X" } } } })).toHaveProperty("invalid")
    expect(paramHeadersOf({ type: "object", anyOf: [{ properties: { a: { type: "string", "x-mcp-header": "X" } } }] })).toHaveProperty("invalid")
  })
})

describe("header values", () => {
  it("strings as given, integers in decimal, booleans in lower case; nothing for null and other types", () => {
    expect([paramHeaderText("us-west1"), paramHeaderText(42), paramHeaderText(-7), paramHeaderText(true), paramHeaderText(false)]).toEqual(["us-west1", "42", "-7", "true", "false"])
    expect([paramHeaderText(null), paramHeaderText(1.5), paramHeaderText({})]).toEqual([undefined, undefined, undefined])
    expect(valueAt({ opts: { dry: true } }, ["opts", "dry"])).toBe(true)
    expect(valueAt({ opts: null }, ["opts", "dry"])).toBeUndefined()
  })

  it("the Base64 sentinel for what is not plain visible ASCII, as the spec's examples", () => {
    expect(headerValue("us-west1")).toBe("us-west1")
    expect(headerValue("Hello, 世界")).toBe("=?base64?SGVsbG8sIOS4lueVjA==?=")
    expect(headerValue(" padded ")).toBe("=?base64?IHBhZGRlZCA=?=")
    expect(headerValue("line1\nline2")).toBe("=?base64?bGluZTEKbGluZTI=?=")
    expect(headerValue("=?base64?literal?=")).toBe("=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=")
  })
})
