// Agent isolation over HTTP: each agent and the store are separate service spaces. An agent's
// service is invisible and uncallable from another agent and from the store, an agent cannot call
// the store's services, the same name may live in several spaces, and agent ids are checked.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { fixtureService, startTestServer, type TestServer } from "../support/index.js"

describe("agent isolation", { timeout: 10_000 }, () => {
  let http: HttpFixture
  let server: TestServer

  beforeAll(async () => {
    http = await startHttpFixture()
    server = await startTestServer()
    const a1 = await server.post("/for_agent/a1/add_service?wait=10", fixtureService("a1svc"))
    expect(a1.status).toBe(200)
    expect(a1.body.services[0]).toMatchObject({ name: "a1svc", status: "healthy", scope: "a1" })
    expect(a1.body.services[0].client_id).toMatch(/^client_a1_a1svc_[0-9a-f]{8}$/)
    const store = await server.post("/for_store/add_service?wait=10", { name: "shared", url: http.url })
    expect(store.body.services[0]).toMatchObject({ status: "healthy", scope: "store" })
  }, 25_000)
  afterAll(async () => {
    await server?.cleanup()
    await http?.stop()
  }, 15_000)

  it("the agent's service is in its own section of the file and only its own space", () => {
    const file = server.readFile() as { mcpServers: Record<string, unknown>; agents: Record<string, { mcpServers: Record<string, unknown> }> }
    expect(Object.keys(file.agents.a1!.mcpServers)).toEqual(["a1svc"])
    expect(Object.keys(file.mcpServers)).toEqual(["shared"])
    expect(server.running.store.forAgent("a1").listServices().map((s) => s.name)).toEqual(["a1svc"])
    expect(server.running.store.forAgent("a2").listServices()).toEqual([])
  })

  it("list_services per agent: a1 sees only its own, a2 (no services) gets an empty list, not 404", async () => {
    const a1 = await server.get("/for_agent/a1/list_services")
    expect(a1.status).toBe(200)
    expect(a1.body.services.map((s: { name: string; scope: string }) => `${s.scope}/${s.name}`)).toEqual(["a1/a1svc"])
    expect(a1.body.total_services).toBe(1)
    const a2 = await server.get("/for_agent/a2/list_services")
    expect(a2.status).toBe(200)
    expect(a2.body).toMatchObject({ success: true, services: [], total_services: 0, total_tools: 0 })
  })

  it("the store's list does not show it; scope=all does, with its agent as scope", async () => {
    const store = await server.get("/for_store/list_services")
    expect(store.body.services.map((s: { name: string }) => s.name)).toEqual(["shared"])
    expect(store.body.total_services).toBe(1)
    const all = await server.get("/for_store/list_services?scope=all")
    const names = all.body.services.map((s: { name: string; scope: string }) => `${s.scope}/${s.name}`).sort()
    expect(names).toEqual(["a1/a1svc", "store/shared"])
  })

  it("only the owner can call it; the owner cannot call the store's services", async () => {
    const own = await server.post("/for_agent/a1/call_tool", { tool_name: "a1svc__echo", args: { text: "mine" } })
    expect(own.status).toBe(200)
    expect(own.body).toMatchObject({ success: true, result: "mine", service_name: "a1svc" })
    // "echo" is also offered by the store's service, but a1's space only holds a1svc: not ambiguous.
    const original = await server.post("/for_agent/a1/use_tool", { tool_name: "echo", args: { text: "plain" } })
    expect(original.status).toBe(200)
    expect(original.body.tool_name).toBe("a1svc__echo")

    for (const [path, tool] of [
      ["/for_agent/a2/call_tool", "a1svc__echo"],
      ["/for_agent/a2/use_tool", "a1svc__echo"],
      ["/for_store/call_tool", "a1svc__echo"],
      ["/for_agent/a1/call_tool", "shared__echo"],
      ["/for_agent/a1/call_tool", "shared__pid"]
    ] as const) {
      const reply = await server.post(path, { tool_name: tool, args: { text: "x" } })
      expect(reply.status, `${path} ${tool}`).toBe(404)
      expect(reply.body.error.code).toBe("TOOL_NOT_FOUND")
    }
    const byServiceName = await server.post("/for_agent/a2/call_tool", { tool_name: "echo", service_name: "a1svc", args: { text: "x" } })
    expect(byServiceName.status).toBe(404)
    expect(byServiceName.body.error.code).toBe("SERVICE_NOT_FOUND")
  })

  it("wait_service sees only its own space; agent scope answers context agent and agent_id", async () => {
    const own = await server.post("/for_agent/a1/wait_service", { client_id_or_service_name: "a1svc", timeout: 5 })
    expect(own.status).toBe(200)
    expect(own.body.data).toMatchObject({ result: true, context: "agent", agent_id: "a1", final_status: "healthy" })
    const byClientId = await server.post("/for_agent/a1/wait_service", {
      client_id_or_service_name: server.running.store.forAgent("a1").listServices()[0]!.client_id,
      timeout: 5
    })
    expect(byClientId.body.data.result).toBe(true)

    for (const path of ["/for_agent/a2/wait_service", "/for_store/wait_service"]) {
      const reply = await server.post(path, { client_id_or_service_name: "a1svc", timeout: 1 })
      expect(reply.status, path).toBe(404)
      expect(reply.body.error.code).toBe("SERVICE_NOT_FOUND")
    }
    const store = await server.post("/for_store/wait_service", { client_id_or_service_name: "shared", timeout: 1 })
    expect(store.body.data.context).toBe("store")
    expect(store.body.data).not.toHaveProperty("agent_id")
  })

  it("the same name may live in the store and in an agent without touching each other", { timeout: 15_000 }, async () => {
    const before = server.running.store.forStore().findService("shared")!
    const reply = await server.post("/for_agent/a2/add_service?wait=10", { name: "shared", url: http.url })
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({ added: ["shared"], unchanged: [] })
    expect(reply.body.services[0]).toMatchObject({ scope: "a2", status: "healthy" })
    expect(server.running.store.forStore().findService("shared")).toBe(before)
    const call = await server.post("/for_agent/a2/call_tool", { tool_name: "shared__echo", args: { text: "a2" } })
    expect(call.body).toMatchObject({ success: true, result: "a2", service_name: "shared" })
    const file = server.readFile() as { agents: Record<string, { mcpServers: Record<string, unknown> }> }
    expect(file.agents.a2!.mcpServers.shared).toEqual({ url: http.url })
  })

  const expectBadAgentId = async (id: string) => {
    const before = server.readFileText()
    for (const [path, body] of [
      ["add_service", fixtureService("svc")],
      ["call_tool", { tool_name: "echo" }],
      ["use_tool", { tool_name: "echo" }],
      ["wait_service", { client_id_or_service_name: "svc" }]
    ] as const) {
      const reply = await server.post(`/for_agent/${id}/${path}`, body)
      expect(reply.status, `${id} ${path}`).toBe(400)
      expect(reply.body).toMatchObject({ success: false, error: { code: "VALIDATION_ERROR" } })
      expect(reply.body.error.details.fields).toEqual(expect.arrayContaining([expect.objectContaining({ field: "agent_id" })]))
    }
    expect(server.readFileText()).toBe(before)
    expect([...server.running.store.agentIds()].sort()).toEqual(["a1", "a2"])
  }

  it("a malformed agent id is 400 naming agent_id, and changes nothing", async () => {
    for (const id of ["bad%20id", "a.b", "%C3%A9t%C3%A9", "a%2Fb"]) await expectBadAgentId(id)
  })

  it("an agent id over 100 characters is 400 naming agent_id (not 405)", async () => {
    await expectBadAgentId("x".repeat(101))
    await expectBadAgentId("x".repeat(500))
  })
})
