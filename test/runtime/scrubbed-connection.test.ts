/**
 * The connection wrapper that keeps a definition's secrets out of failures, close reasons and
 * stderr lines covers every method of McpConnection, including ones added after it was written:
 * a unit test with an in-process stand-in for the connection.
 */
import { describe, expect, it } from "vitest"
import { scrubbedConnection } from "../../src/runtime/adapter.js"
import type { McpConnection } from "../../src/mcp/types.js"

const SECRET = "s3cr3t-value-123"

describe("scrubbedConnection", () => {
  it("scrubs the failure of any method returning a promise, close reasons and stderr; passes values through", async () => {
    let closeListener: ((reason: string) => void) | undefined
    const fake = {
      transportType: "stdio",
      pid: 42,
      callTool: async () => {
        throw new Error(`upstream said: bad key ${SECRET}`)
      },
      someFutureMethod: async () => {
        throw new Error(`token=${SECRET}`)
      },
      listTools: async () => ({ tools: [{ name: SECRET }] }),
      onClose: (listener: (reason: string) => void) => {
        closeListener = listener
      },
      stderrTail: () => [`env KEY=${SECRET}`, "plain"]
    }
    const wrapped = scrubbedConnection(fake as unknown as McpConnection, [SECRET]) as unknown as typeof fake
    expect(wrapped.transportType).toBe("stdio")
    expect(wrapped.pid).toBe(42)
    await expect(wrapped.callTool()).rejects.toThrow("upstream said: bad key ***")
    await expect(wrapped.someFutureMethod()).rejects.toThrow("token=***")
    // A success is the upstream's answer, unchanged.
    expect(await wrapped.listTools()).toEqual({ tools: [{ name: SECRET }] })
    expect(wrapped.stderrTail()).toEqual(["env KEY=***", "plain"])
    const reasons: string[] = []
    wrapped.onClose((r) => reasons.push(r))
    closeListener?.(`closed with ${SECRET}`)
    expect(reasons).toEqual(["closed with ***"])
    // The same function every time (no allocation per access).
    expect(wrapped.callTool).toBe(wrapped.callTool)
  })

  it("is the connection itself when the definition has no secret", () => {
    const fake = {} as McpConnection
    expect(scrubbedConnection(fake, [])).toBe(fake)
  })
})
