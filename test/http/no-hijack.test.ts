// A callable name `<service>__<tool>` whose `<service>` is registered goes to that service or
// nowhere. Here a real upstream ("helper", the HTTP fixture with every tool name prefixed `demo__`)
// advertises tools literally named `demo__add`, `demo__only_here`, ...: while service `demo` has no
// tool list (starting up, just added, reconnecting after a changed definition, never connected,
// disconnected), a call to `demo__add` must wait for `demo` or fail, never run on `helper`.
//
// `demo` is the stdio fixture behind a gate: a shell that starts it only once a gate file exists,
// so the test decides how long `demo` stays `initializing`.
import { existsSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { gatedStdioFixture } from "../fixtures/paths.js"
import { closedPort, eventually, freshDir, localService, startTestServer, type TestServer } from "../support/index.js"

/** `demo`: the stdio fixture, started only once `gate` exists. */
const gatedFixture = (gate: string) => ({ command: gatedStdioFixture(gate).command, args: [...gatedStdioFixture(gate).args] })

describe("a callable name never falls back to another service's tool of that literal name", { timeout: 30_000 }, () => {
  let helper: HttpFixture
  let server: TestServer | undefined

  beforeAll(async () => {
    helper = await startHttpFixture({
      server: {
        prefix: "demo__",
        extraTools: [{ name: "only_here", description: "Only the helper has it.", run: () => ({ content: [{ type: "text", text: "helper" }] }) }]
      }
    })
  }, 15_000)
  afterAll(async () => {
    await helper?.stop()
  }, 15_000)
  afterEach(async () => {
    await server?.cleanup()
    server = undefined
  }, 15_000)

  const helperDefinition = () => ({ url: helper.url })

  /** Waits until a service is healthy (404 and time-outs fail the test). */
  const healthy = async (s: TestServer, name: string, prefix = "/for_store") => {
    const reply = await s.post(`${prefix}/wait_service`, { client_id_or_service_name: name, status: "healthy", timeout: 15 })
    expect(reply.body.data?.result, reply.text).toBe(true)
  }
  const statusOf = async (s: TestServer, name: string) =>
    (await s.get(`/for_store/service_status/${name}`)).body.status as string
  const helperRecords = async (s: TestServer) =>
    (await s.get("/for_store/tool_records?service_name=helper")).body.total as number

  it("at start-up: the call waits for the initializing service (504 at its time-out), then runs on it", async () => {
    const dir = freshDir()
    const gate = join(dir, "gate")
    server = await startTestServer({
      dir,
      services: { mcpServers: { helper: helperDefinition(), demo: gatedFixture(gate) } }
    })
    await healthy(server, "helper")
    expect(await statusOf(server, "demo")).toBe("initializing")
    // The helper really offers the literal name: called as its own callable name, it answers.
    const own = await server.post("/for_store/call_tool", { tool_name: "helper__demo__add", args: { a: 1, b: 1 } })
    expect(own.body).toMatchObject({ success: true, service_name: "helper", original_name: "demo__add" })

    const early = await server.post("/for_store/call_tool", { tool_name: "demo__add", args: { a: 2, b: 3 }, timeout: 0.5 })
    expect(early.status, early.text).toBe(504)
    expect(early.body.error.code).toBe("TOOL_TIMEOUT")
    expect(await helperRecords(server)).toBe(1) // only the call by its own name

    // A call that arrives while `demo` is initializing waits for it and runs on it.
    const waiting = server.post("/for_store/call_tool", { tool_name: "demo__add", args: { a: 2, b: 3 }, timeout: 20 })
    const store = server.running.store
    expect(await eventually(() => store.waiters.active === 1, 5_000)).toBe(true)
    writeFileSync(gate, "")
    const reply = await waiting
    expect(reply.status, reply.text).toBe(200)
    expect(reply.body).toMatchObject({ success: true, service_name: "demo", original_name: "add", tool_name: "demo__add", result: "5" })
    expect(store.waiters.active).toBe(0)
    expect(await helperRecords(server)).toBe(1)
  })

  it("just added, and reconnecting after a changed definition: waits for that service, never the helper", async () => {
    const dir = freshDir()
    server = await startTestServer({ dir, services: { mcpServers: { helper: helperDefinition() } } })
    await healthy(server, "helper")
    const firstGate = join(dir, "gate-1")
    const added = await server.post("/for_store/add_service", localService("demo", gatedStdioFixture(firstGate)))
    expect(added.status, added.text).toBe(200)
    const early = await server.post("/for_store/call_tool", { tool_name: "demo__echo", args: { text: "x" }, timeout: 0.3 })
    expect(early.status, early.text).toBe(504)
    writeFileSync(firstGate, "")
    await healthy(server, "demo")
    expect((await server.post("/for_store/call_tool", { tool_name: "demo__echo", args: { text: "a" } })).body).toMatchObject({ service_name: "demo", result: "a" })

    // A changed definition: the old connection is closed and `demo` is initializing again.
    const secondGate = join(dir, "gate-2")
    const updated = await server.request("PUT", "/for_store/update_service/demo", {
      body: JSON.stringify(gatedFixture(secondGate)),
      headers: { "content-type": "application/json" }
    })
    expect(updated.status, updated.text).toBe(200)
    expect(await statusOf(server, "demo")).toBe("initializing")
    const during = await server.post("/for_store/call_tool", { tool_name: "demo__echo", args: { text: "b" }, timeout: 0.3 })
    expect(during.status, during.text).toBe(504)
    expect(existsSync(secondGate)).toBe(false)
    writeFileSync(secondGate, "")
    await healthy(server, "demo")
    expect((await server.post("/for_store/call_tool", { tool_name: "demo__echo", args: { text: "c" } })).body).toMatchObject({ service_name: "demo", result: "c" })
    expect(await helperRecords(server)).toBe(0)
    expect(server.running.store.waiters.active).toBe(0)
  })

  it("connected without the tool: 404 TOOL_NOT_FOUND, though the helper has a tool of that literal name", async () => {
    const dir = freshDir()
    const gate = join(dir, "gate")
    writeFileSync(gate, "")
    server = await startTestServer({ dir, services: { mcpServers: { helper: helperDefinition(), demo: gatedFixture(gate) } } })
    await healthy(server, "helper")
    await healthy(server, "demo")
    const reply = await server.post("/for_store/call_tool", { tool_name: "demo__only_here", args: {} })
    expect(reply.status, reply.text).toBe(404)
    expect(reply.body.error.code).toBe("TOOL_NOT_FOUND")
    const own = await server.post("/for_store/call_tool", { tool_name: "helper__demo__only_here", args: {} })
    expect(own.body).toMatchObject({ success: true, service_name: "helper", result: "helper" })
  })

  it("not connected: 503 SERVICE_UNAVAILABLE for that service (never connected, and disconnected)", async () => {
    const dir = freshDir()
    const gate = join(dir, "gate")
    writeFileSync(gate, "")
    const port = await closedPort()
    server = await startTestServer({
      dir,
      services: {
        mcpServers: { helper: helperDefinition(), demo: gatedFixture(gate) },
        agents: { "agent-1": { mcpServers: { helper: helperDefinition(), demo: { url: `http://127.0.0.1:${port}/mcp` } } } }
      }
    })
    await healthy(server, "helper")
    await healthy(server, "demo")
    await healthy(server, "helper", "/for_agent/agent-1")
    // The agent's `demo` never connected (nothing listens): it has no tool list at all.
    const left = await server.post("/for_agent/agent-1/wait_service", { client_id_or_service_name: "demo", status: ["reconnecting", "unreachable"], timeout: 15 })
    expect(left.body.data.result, left.text).toBe(true)
    const never = await server.post("/for_agent/agent-1/call_tool", { tool_name: "demo__add", args: { a: 1, b: 2 } })
    expect(never.status, never.text).toBe(503)
    expect(never.body.error.code).toBe("SERVICE_UNAVAILABLE")
    expect(never.body.error.details).toMatchObject({ service_name: "demo" })
    expect(["reconnecting", "unreachable"]).toContain(never.body.error.details.status)

    const off = await server.post("/for_store/disconnect_service", { service_name: "demo" })
    expect(off.body).toMatchObject({ success: true, status: "disconnected" })
    const reply = await server.post("/for_store/call_tool", { tool_name: "demo__add", args: { a: 1, b: 2 } })
    expect(reply.status, reply.text).toBe(503)
    expect(reply.body.error.details).toMatchObject({ service_name: "demo", status: "disconnected" })
    expect(await helperRecords(server)).toBe(0)
    expect((await server.get("/for_agent/agent-1/tool_records?service_name=helper")).body.total).toBe(0)
  })
})
