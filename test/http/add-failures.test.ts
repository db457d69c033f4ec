/**
 * Failures reported as failures: after add_service `?wait`, each service's
 * outcome is in the answer (`connected`, `failed` with error and hint, `pending`); `success` is
 * false when every service failed, the registration kept (HTTP 200, the message says so).
 * Permanent failures (an executable that does not exist, a command line written as one string,
 * HTTP 404 to the first initialize) go `unreachable` at once, with a hint kept in the service.
 */
import { createServer, type Server } from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { closedPort, fixtureService, startTestServer, type TestServer } from "../support/index.js"

describe("add_service ?wait reports each service's outcome", () => {
  let server: TestServer
  let notMcp: Server
  let notMcpUrl = ""

  beforeAll(async () => {
    // Reconnection attempts far apart and a long unreachable cadence: a permanent failure must not
    // wait for them to be reported, nor be retried meanwhile.
    server = await startTestServer({ monitoring: { reconnection_seconds: 60, unreachable_retry_seconds: 3600 } })
    // An HTTP server with no MCP endpoint: 404 to everything.
    notMcp = createServer((request, response) => {
      request.resume()
      response.writeHead(404, { "content-type": "text/plain" }).end("not found")
    })
    await new Promise<void>((resolve) => notMcp.listen(0, "127.0.0.1", resolve))
    const address = notMcp.address()
    notMcpUrl = `http://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}/mcp`
  })
  afterAll(async () => {
    await server?.cleanup()
    await new Promise<void>((resolve) => (notMcp ? notMcp.close(() => resolve()) : resolve()))
  })

  it("a command that does not exist: success false, unreachable at once, hint, registration kept", async () => {
    const started = performance.now()
    const reply = await server.post("/for_store/add_service?wait=10", { name: "ghost", command: "no-such-cmd-mcp-store" })
    expect(reply.status).toBe(200)
    expect(reply.body.success).toBe(false)
    expect(reply.body.added).toEqual(["ghost"])
    expect(reply.body.connected).toEqual([])
    expect(reply.body.failed).toHaveLength(1)
    const failed = reply.body.failed[0]
    expect(failed).toMatchObject({ name: "ghost", status: "unreachable" })
    expect(failed.error).toContain("ENOENT")
    expect(failed.hint).toMatch(/not found on the store's PATH/)
    expect(reply.body.message).toMatch(/none connected/)
    expect(reply.body.message).toMatch(/kept in the services file/)
    // At once: no reconnection backoff was waited for (it is 60 s here), nor the whole wait.
    expect(performance.now() - started).toBeLessThan(8_000)
    // Kept: in the services file and in list_services, with its hint.
    expect((server.readFile().mcpServers as Record<string, unknown>).ghost).toEqual({ command: "no-such-cmd-mcp-store" })
    const listed = (await server.get("/for_store/list_services")).body.services.find((s: { name: string }) => s.name === "ghost")
    expect(listed).toMatchObject({ status: "unreachable", hint: failed.hint })
    const status = await server.get("/for_store/service_status/ghost")
    expect(status.body).toMatchObject({ status: "unreachable", hint: failed.hint, reconnect_attempts: 0 })
    // Not retried on the reconnection cadence: its next try is on the unreachable one (an hour here).
    expect(Date.parse(listed.next_retry_at) - Date.now()).toBeGreaterThan(3_000_000)
  })

  it('a command line written as one string ("npx -y pkg"): the hint says to put the arguments in "args"', async () => {
    const reply = await server.post("/for_store/add_service?wait=10", { name: "spaced", command: "npx -y some-mcp-package" })
    expect(reply.status).toBe(200)
    expect(reply.body.success).toBe(false)
    expect(reply.body.failed[0]).toMatchObject({ name: "spaced", status: "unreachable" })
    expect(reply.body.failed[0].hint).toContain('command contains spaces: put the arguments in "args"')
    expect(reply.body.failed[0].hint).toContain('"command": "npx", "args": ["-y","some-mcp-package"]')
    expect((await server.get("/for_store/service_status/spaced")).body.status).toBe("unreachable")
  })

  it("a URL that answers 404 to the first initialize: unreachable at once, hint about the path", async () => {
    const reply = await server.post("/for_store/add_service?wait=10", { name: "nowhere", url: notMcpUrl })
    expect(reply.status).toBe(200)
    expect(reply.body.success).toBe(false)
    expect(reply.body.failed[0]).toMatchObject({ name: "nowhere", status: "unreachable" })
    expect(reply.body.failed[0].error).toContain("HTTP 404")
    expect(reply.body.failed[0].hint).toMatch(/check the URL's path/)
  })

  it("a URL nothing listens on: a transient failure, reported as failed (reconnecting), no hint", async () => {
    const url = `http://127.0.0.1:${await closedPort()}/mcp`
    const reply = await server.post("/for_store/add_service?wait=10", { name: "down", url })
    expect(reply.status).toBe(200)
    expect(reply.body.success).toBe(false)
    expect(reply.body.failed[0]).toMatchObject({ name: "down", status: "reconnecting", hint: null })
    expect(reply.body.failed[0].error).toContain("ECONNREFUSED")
  })

  it("a mixed add (one good fixture, one ghost): success true, both lists", async () => {
    const reply = await server.post("/for_store/add_service?wait=20", [fixtureService("good"), { name: "ghost2", command: "no-such-cmd-mcp-store-2" }])
    expect(reply.status).toBe(200)
    expect(reply.body.success).toBe(true)
    expect(reply.body.connected).toEqual(["good"])
    expect(reply.body.failed.map((f: { name: string }) => f.name)).toEqual(["ghost2"])
    expect(reply.body.failed[0].hint).toMatch(/not found/)
    expect(reply.body.pending).toEqual([])
    expect(reply.body.message).toMatch(/connected: good; failed: ghost2 is unreachable/)
  })

  it("without ?wait the answer has no outcome lists (the contract's fields only)", async () => {
    const reply = await server.post("/for_store/add_service", { name: "later", command: "no-such-cmd-mcp-store-3" })
    expect(reply.status).toBe(200)
    expect(reply.body.success).toBe(true)
    expect(reply.body).not.toHaveProperty("failed")
    expect(reply.body).not.toHaveProperty("connected")
  })
})
