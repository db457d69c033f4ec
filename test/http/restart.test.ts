// Persistence across a restart of mcp-store: services added over HTTP (store and agents, stdio and
// Streamable HTTP) are all back and healthy after a new server starts on the same file, agent
// services in their agent; closing the server ends every child process. Also reads the Python
// MCPStore's `<name>_byagent_<agent>` keys.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { stdioFixture } from "../fixtures/paths.js"
import { firstText, fixtureService, freshDir, processGone, startTestServer, type TestServer } from "../support/index.js"
import { rmSync } from "node:fs"

describe("restart restores every service from the file", { timeout: 10_000 }, () => {
  let http: HttpFixture
  let dir: string
  let first: TestServer | undefined
  let second: TestServer | undefined

  beforeAll(async () => {
    http = await startHttpFixture()
    dir = freshDir()
  }, 15_000)
  afterAll(async () => {
    await first?.close()
    await second?.close()
    await http?.stop()
    rmSync(dir, { recursive: true, force: true })
  }, 15_000)

  const pidOf = async (server: TestServer, prefix: string, tool: string) =>
    Number(firstText((await server.post(`${prefix}/call_tool`, { tool_name: tool })).body.content))

  it("restores store and agent services, healthy, in their scopes", { timeout: 40_000 }, async () => {
    first = await startTestServer({ dir })
    const store = await first.post("/for_store/add_service?wait=10", [fixtureService("s1"), { name: "h1", url: http.url }])
    const a1 = await first.post("/for_agent/a1/add_service?wait=10", fixtureService("s1"))
    const a2 = await first.post("/for_agent/a2/add_service?wait=10", { name: "h2", url: http.url })
    for (const reply of [store, a1, a2]) {
      expect(reply.status).toBe(200)
      for (const s of reply.body.services) expect(s.status).toBe("healthy")
    }
    const oldStorePid = await pidOf(first, "/for_store", "s1__pid")
    const oldAgentPid = await pidOf(first, "/for_agent/a1", "s1__pid")
    expect(oldStorePid).not.toBe(oldAgentPid)
    const fileBefore = first.readFileText()

    await first.close()
    // Closing the server ended its children.
    expect(processGone(oldStorePid)).toBe(true)
    expect(processGone(oldAgentPid)).toBe(true)
    first = undefined

    second = await startTestServer({ dir })
    const expected: Array<[string, string]> = [
      ["/for_store", "s1"],
      ["/for_store", "h1"],
      ["/for_agent/a1", "s1"],
      ["/for_agent/a2", "h2"]
    ]
    for (const [prefix, name] of expected) {
      const wait = await second.post(`${prefix}/wait_service`, { client_id_or_service_name: name, timeout: 15 })
      expect(wait.status, `${prefix} ${name}`).toBe(200)
      expect(wait.body.data, `${prefix} ${name}`).toMatchObject({ result: true, final_status: "healthy" })
    }
    const all = await second.get("/for_store/list_services?scope=all")
    const seen = all.body.services.map((s: { scope: string; name: string; status: string }) => `${s.scope}/${s.name}/${s.status}`).sort()
    expect(seen).toEqual(["a1/s1/healthy", "a2/h2/healthy", "store/h1/healthy", "store/s1/healthy"])
    expect((await second.get("/for_store/list_services")).body.services.map((s: { name: string }) => s.name).sort()).toEqual(["h1", "s1"])
    expect([...second.running.store.agentIds()].sort()).toEqual(["a1", "a2"])

    // New processes, and each call lands in its own scope.
    const newStorePid = await pidOf(second, "/for_store", "s1__pid")
    const newAgentPid = await pidOf(second, "/for_agent/a1", "s1__pid")
    expect(newStorePid).toBeGreaterThan(0)
    expect(newAgentPid).toBeGreaterThan(0)
    expect(newStorePid).not.toBe(newAgentPid)
    expect([oldStorePid, oldAgentPid]).not.toContain(newStorePid)
    const echo = await second.post("/for_agent/a2/call_tool", { tool_name: "h2__echo", args: { text: "restored" } })
    expect(echo.body).toMatchObject({ success: true, result: "restored" })
    // Loading does not rewrite the file.
    expect(second.readFileText()).toBe(fileBefore)
  })

  it("reads `<name>_byagent_<agent>` keys as agent services", { timeout: 20_000 }, async () => {
    const launch = stdioFixture()
    const server = await startTestServer({
      services: { mcpServers: { fx_byagent_a3: { command: launch.command, args: launch.args } } }
    })
    try {
      const wait = await server.post("/for_agent/a3/wait_service", { client_id_or_service_name: "fx", timeout: 15 })
      expect(wait.body.data).toMatchObject({ result: true, context: "agent", agent_id: "a3" })
      expect((await server.get("/for_store/list_services")).body.total_services).toBe(0)
      const call = await server.post("/for_agent/a3/call_tool", { tool_name: "fx__echo", args: { text: "py" } })
      expect(call.body).toMatchObject({ success: true, result: "py" })
    } finally {
      await server.cleanup()
    }
  })
})
