// Names that are also keys of Object.prototype ("constructor", "toString", "__proto__",
// "hasOwnProperty"): valid service names and agent ids by the contract's patterns, and lookups of
// unknown names. They must behave like any other name: 404 when unknown (never 500), and a service
// or an agent by that name can be added and used.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { startTestServer, type TestServer } from "../support/server.js"

describe("Object.prototype keys as names", { timeout: 10_000 }, () => {
  let http: HttpFixture

  beforeAll(async () => {
    http = await startHttpFixture()
  }, 15_000)
  afterAll(async () => {
    await http?.stop()
  }, 15_000)

  describe("lookups of unknown names", { timeout: 10_000 }, () => {
    let server: TestServer
    beforeAll(async () => {
      server = await startTestServer({ services: { mcpServers: {} } })
    }, 15_000)
    afterAll(async () => {
      await server?.cleanup()
    }, 15_000)

    it.each(["constructor", "toString", "__proto__", "hasOwnProperty", "valueOf"])("store: %s is unknown (404, not 500)", async (name) => {
      const wait = await server.post("/for_store/wait_service", { client_id_or_service_name: name, timeout: 0.2 })
      expect(wait.status, wait.text).toBe(404)
      expect(wait.body.error.code).toBe("SERVICE_NOT_FOUND")
      const del = await server.post("/for_store/delete_service_two_step", { service_name: name })
      expect(del.status, del.text).toBe(404)
      const byService = await server.post("/for_store/call_tool", { tool_name: "echo", service_name: name })
      expect(byService.status, byService.text).toBe(404)
      const callable = await server.post("/for_store/call_tool", { tool_name: `${name}__echo`, args: { text: "x" } })
      expect(callable.status, callable.text).toBe(404)
      expect(callable.body.error.code).toBe("TOOL_NOT_FOUND")
    })

    it.each(["constructor", "__proto__", "hasOwnProperty"])("agent %s without services: 404 for its lookups, not 500", async (id) => {
      const wait = await server.post(`/for_agent/${id}/wait_service`, { client_id_or_service_name: "x", timeout: 0.2 })
      expect(wait.status, wait.text).toBe(404)
      expect(wait.body.error.code).toBe("SERVICE_NOT_FOUND")
      const call = await server.post(`/for_agent/${id}/call_tool`, { tool_name: "echo" })
      expect(call.status, call.text).toBe(404)
      expect(call.body.error.code).toBe("TOOL_NOT_FOUND")
    })
  })

  describe("adding them", { timeout: 10_000 }, () => {
    let server: TestServer | undefined
    afterEach(async () => {
      await server?.cleanup()
      server = undefined
    }, 15_000)

    it.each(["constructor", "toString"])("a store service named %s is added, healthy and callable", { timeout: 15_000 }, async (name) => {
      server = await startTestServer({ services: { mcpServers: {} } })
      const reply = await server.post("/for_store/add_service?wait=10", { name, url: http.url })
      expect(reply.status, reply.text).toBe(200)
      expect(reply.body.added).toEqual([name])
      expect(reply.body.services[0]).toMatchObject({ name, status: "healthy" })
      const call = await server.post("/for_store/call_tool", { tool_name: `${name}__echo`, args: { text: "proto" } })
      expect(call.body).toMatchObject({ success: true, result: "proto" })
    })

    it.each(["constructor", "__proto__"])("an agent named %s gets its own service", { timeout: 15_000 }, async (id) => {
      server = await startTestServer({ services: { mcpServers: {} } })
      const reply = await server.post(`/for_agent/${id}/add_service?wait=10`, { name: "svc", url: http.url })
      expect(reply.status, reply.text).toBe(200)
      expect(reply.body.services[0]).toMatchObject({ name: "svc", status: "healthy", scope: id })
      const call = await server.post(`/for_agent/${id}/call_tool`, { tool_name: "svc__echo", args: { text: "agent proto" } })
      expect(call.body).toMatchObject({ success: true, result: "agent proto" })
      // And it stays out of the store's space.
      expect((await server.get("/for_store/list_services")).body.total_services).toBe(0)
    })
  })
})
