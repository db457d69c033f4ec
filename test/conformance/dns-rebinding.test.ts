/**
 * The official MCP conformance suite (@modelcontextprotocol/conformance) runs its
 * `dns-rebinding-protection` scenario against the store's MCP endpoints: a request with a foreign
 * Host and Origin must be refused (4xx), one with the endpoint's own must be served (2xx). The
 * suite runs as its own process (its command bundled, test/support/programs.ts); the two
 * endpoints' runs go at the same time.
 */
import { afterAll, beforeAll, describe, it } from "vitest"
import { conformanceScenario as scenario, startTestServer, type TestServer } from "../support/index.js"

describe("MCP conformance: dns-rebinding-protection", () => {
  let server: TestServer
  beforeAll(async () => {
    server = await startTestServer()
  })
  afterAll(() => server.cleanup())

  // The two runs at the same time: each is a process of its own that spends most of its time loading the suite.
  it.concurrent.for(["/mcp", "/for_agent/conformance/mcp"])("passes on %s", { timeout: 90_000 }, async (path, { expect }) => {
    const result = await scenario(`${server.url}${path}`, "dns-rebinding-protection")
    const byId = Object.fromEntries(result.checks.map((c) => [c.id, c.status]))
    expect(byId, result.output).toEqual({
      "localhost-host-rebinding-rejected": "SUCCESS",
      "localhost-host-valid-accepted": "SUCCESS"
    })
    expect(result.code, result.output).toBe(0)
  })
})
