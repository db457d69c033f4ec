// Clear connect errors, against the reference server in its two HTTP modes: a
// wrong path says there is no MCP endpoint there (not that a session expired), an SSE endpoint
// registered as Streamable HTTP says to use the SSE transport, and a Streamable HTTP endpoint
// registered as SSE says to use Streamable HTTP. Each is permanent (retrying cannot mend it), and
// the probe that tells them apart is one bounded request.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { connect } from "../../src/mcp/connect.js"
import { probeTransport } from "../../src/mcp/probe.js"
import { startEverythingHttp, type EverythingHttp } from "../fixtures/everything-http.js"
import { failureOf, remoteDef, T } from "../support/index.js"

let sse: EverythingHttp
let streamable: EverythingHttp

beforeAll(async () => {
  ;[sse, streamable] = await Promise.all([startEverythingHttp("sse"), startEverythingHttp("streamableHttp")])
})
afterAll(async () => {
  await Promise.all([sse?.stop(), streamable?.stop()])
})

describe("the first connect names what is wrong", () => {
  it("a wrong path: no MCP endpoint at <url> (HTTP 404)", async () => {
    const url = streamable.url.replace(/\/mcp$/, "/nothing-here")
    const failure = await failureOf(connect(remoteDef(url), T))
    expect(failure.message).toBe(`no MCP endpoint at ${url} (HTTP 404)`)
    expect(failure.message).not.toMatch(/session/)
    expect(failure.permanent).toBe(true)
    expect(failure.hint).toMatch(/check the URL's path/)
  })

  it("an SSE server registered as Streamable HTTP: use the SSE transport", async () => {
    const failure = await failureOf(connect(remoteDef(sse.url, "streamable_http"), T))
    expect(failure.message).toMatch(new RegExp(`^${sse.url.replace(/[.]/g, "\\.")} is an SSE endpoint: its POST was refused \\(HTTP 40[45]\\) and a GET opens an event stream$`))
    expect(failure.hint).toBe(`use the SSE transport: set "transport": "sse"`)
    expect(failure.permanent).toBe(true)
  })

  it("a Streamable HTTP server registered as SSE: use Streamable HTTP", async () => {
    const failure = await failureOf(connect(remoteDef(streamable.url, "sse"), T))
    expect(failure.message).toMatch(/is a Streamable HTTP endpoint: it refused the SSE stream \(HTTP 4\d\d\) and answers a JSON-RPC POST$/)
    expect(failure.hint).toMatch(/^use Streamable HTTP/)
    expect(failure.permanent).toBe(true)
  })

  it("each mode with its own transport connects (the probe is only asked after a refusal)", async () => {
    for (const def of [remoteDef(sse.url, "sse"), remoteDef(streamable.url, "streamable_http")]) {
      const conn = await connect(def, T)
      expect((await conn.listTools(T)).length).toBeGreaterThan(0)
      await conn.close()
    }
  })
})

describe("the probe", () => {
  it("tells each mode, and says nothing of a URL that is neither or does not answer", async () => {
    expect(await probeTransport(sse.url, {}, "sse")).toBe("sse")
    expect(await probeTransport(streamable.url, {}, "streamable_http")).toBe("streamable_http")
    expect(await probeTransport(streamable.url.replace(/\/mcp$/, "/nothing-here"), {}, "sse")).toBeUndefined()
    expect(await probeTransport(streamable.url.replace(/\/mcp$/, "/nothing-here"), {}, "streamable_http")).toBeUndefined()
    expect(await probeTransport("http://127.0.0.1:9/mcp", {}, "sse")).toBeUndefined()
  })
})
