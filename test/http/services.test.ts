// Registering services over HTTP against real upstreams (the stdio fixture and the Streamable HTTP
// fixture): add_service ?wait, wait_service, list_services' Service form, unchanged and updated
// re-adds, and the services file written before the answer.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { eventually, firstText, fixtureService, processGone, startTestServer, type TestServer } from "../support/index.js"

const FIXTURE_TOOLS = ["echo", "add", "fail", "sleep", "add_tool", "pid"]
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/

describe("store add_service with real upstreams", { timeout: 10_000 }, () => {
  let http: HttpFixture
  let server: TestServer

  beforeAll(async () => {
    http = await startHttpFixture()
    server = await startTestServer()
  }, 15_000)
  afterAll(async () => {
    await server?.cleanup()
    await http?.stop()
  }, 15_000)

  const localDef = { ...fixtureService("local"), env: { FIXTURE_SECRET: "s3cr3t-env-value" } }
  const remoteDef = () => ({ name: "remote", url: http.url, headers: { "x-token": "s3cr3t-header-value" } })

  it("registers a stdio and a Streamable HTTP service and writes the file before answering", { timeout: 25_000 }, async () => {
    const reply = await server.post("/for_store/add_service?wait=10", [localDef, remoteDef()])
    // Read the file at once: it must already hold both definitions.
    const onDisk = server.readFile() as { mcpServers: Record<string, Record<string, unknown>> }
    expect(reply.status).toBe(200)
    expect(reply.body.success).toBe(true)
    expect(reply.body.added).toEqual(["local", "remote"])
    expect(reply.body.updated).toEqual([])
    expect(reply.body.unchanged).toEqual([])
    const statuses = Object.fromEntries(reply.body.services.map((s: { name: string; status: string }) => [s.name, s.status]))
    // ?wait=10 blocks until each service has left `initializing`; the fixtures connect well within it.
    expect(statuses).toEqual({ local: "healthy", remote: "healthy" })

    expect(onDisk.mcpServers.local).toMatchObject({ command: localDef.command, args: localDef.args, env: localDef.env })
    expect(onDisk.mcpServers.remote).toMatchObject({ url: http.url, headers: { "x-token": "s3cr3t-header-value" } })
    expect(onDisk.mcpServers.local).not.toHaveProperty("name")
  })

  it("wait_service answers healthy for both", async () => {
    for (const name of ["local", "remote"]) {
      const reply = await server.post("/for_store/wait_service", { client_id_or_service_name: name, status: "healthy", timeout: 5 })
      expect(reply.status).toBe(200)
      expect(reply.body).toMatchObject({ success: true, message: "Service wait completed: success" })
      expect(reply.body.data).toMatchObject({ result: true, final_status: "healthy", context: "store", client_id_or_service_name: name })
    }
  })

  it("list_services gives the Service list form and total_tools, without secrets", async () => {
    const reply = await server.get("/for_store/list_services")
    expect(reply.status).toBe(200)
    expect(reply.body.success).toBe(true)
    expect(reply.body.total_services).toBe(2)
    expect(reply.body.total_tools).toBe(2 * FIXTURE_TOOLS.length)
    const byName = Object.fromEntries(reply.body.services.map((s: { name: string }) => [s.name, s]))
    const local = byName.local
    const remote = byName.remote
    const fields = [
      "name", "url", "status", "tool_count", "transport_type", "command", "args", "scope", "client_id", "last_error",
      "last_state_change", "consecutive_failures", "reconnect_attempts", "next_retry_at", "response_time_ms"
    ]
    for (const s of [local, remote]) {
      for (const f of fields) expect(s, `field ${f}`).toHaveProperty(f)
      expect(s.status).toBe("healthy")
      expect(s.tool_count).toBe(FIXTURE_TOOLS.length)
      expect(s.scope).toBe("store")
      expect(s.last_error).toBeNull()
      expect(s.last_state_change).toMatch(ISO)
      expect(s.consecutive_failures).toBe(0)
      expect(s.reconnect_attempts).toBe(0)
      expect(s.next_retry_at).toBeNull()
      expect(s.response_time_ms === null || typeof s.response_time_ms === "number").toBe(true)
    }
    expect(local).toMatchObject({ url: "", transport_type: "stdio", command: localDef.command, args: localDef.args })
    expect(local.client_id).toMatch(/^client_store_local_[0-9a-f]{8}$/)
    expect(remote).toMatchObject({ url: http.url, transport_type: "streamable_http", command: null, args: null })
    expect(remote.client_id).toMatch(/^client_store_remote_[0-9a-f]{8}$/)
    // Environment and header values are never returned.
    expect(reply.text).not.toContain("s3cr3t")
  })

  it("re-adding the identical definition changes nothing (same process, same file)", { timeout: 20_000 }, async () => {
    const pidBefore = firstText((await server.post("/for_store/call_tool", { tool_name: "local__pid" })).body.content)
    const fileBefore = server.readFileText()
    const reply = await server.post("/for_store/add_service?wait=10", [localDef, remoteDef()])
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({ success: true, added: [], updated: [], unchanged: ["local", "remote"] })
    expect(reply.body.services.map((s: { status: string }) => s.status)).toEqual(["healthy", "healthy"])
    const pidAfter = firstText((await server.post("/for_store/call_tool", { tool_name: "local__pid" })).body.content)
    expect(pidAfter).toBe(pidBefore)
    expect(server.readFileText()).toBe(fileBefore)
  })

  it("a changed definition is `updated`: written, reconnected (new process), healthy again", { timeout: 25_000 }, async () => {
    const list = await server.get("/for_store/list_services")
    const oldClientId = list.body.services.find((s: { name: string }) => s.name === "local").client_id
    const oldPid = Number(firstText((await server.post("/for_store/call_tool", { tool_name: "local__pid" })).body.content))
    expect(oldPid).toBeGreaterThan(0)

    const changed = { ...fixtureService("local", "--name", "fixture-v2"), env: { FIXTURE_SECRET: "s3cr3t-env-value" } }
    const reply = await server.post("/for_store/add_service?wait=10", changed)
    const onDisk = server.readFile() as { mcpServers: Record<string, { args: string[] }> }
    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({ success: true, added: [], updated: ["local"], unchanged: [] })
    expect(onDisk.mcpServers.local!.args).toEqual(changed.args)
    expect(reply.body.services[0].status).toBe("healthy")
    expect(reply.body.services[0].args).toEqual(changed.args)
    expect(reply.body.services[0].client_id).not.toBe(oldClientId)

    const newPid = Number(firstText((await server.post("/for_store/call_tool", { tool_name: "local__pid" })).body.content))
    expect(newPid).toBeGreaterThan(0)
    expect(newPid).not.toBe(oldPid)
    // The old process was ended with the old connection.
    expect(await eventually(() => processGone(oldPid), 5_000)).toBe(true)

    const actor = server.running.store.forStore().findService("local")!
    const transitions = actor.getSnapshot().context.transitions
    expect(transitions.some((t) => t.to === "initializing" && t.reason === "definition changed")).toBe(true)
  })

  it("client_id and the list form follow a changed definition and status (views and hashes are cached)", { timeout: 25_000 }, async () => {
    const listed = async () =>
      ((await server.get("/for_store/list_services")).body.services as Array<Record<string, unknown>>).find((s) => s.name === "remote")!
    const before = await listed()
    // Asked twice with nothing changed: the same answer, but for the last health check's response
    // time (checks run every 0.5 s here, and one may come between the two reads).
    const unchecked = ({ response_time_ms: _checked, ...rest }: Record<string, unknown>) => rest
    expect(unchecked(await listed())).toEqual(unchecked(before))
    const oldClientId = before.client_id as string
    expect((await server.get(`/for_store/service_status/${encodeURIComponent(oldClientId)}`)).status).toBe(200)

    const update = await server.request("PUT", "/for_store/update_service/remote", {
      body: JSON.stringify({ url: `${http.url}?v=2` }),
      headers: { "content-type": "application/json" }
    })
    expect(update.status, JSON.stringify(update.body)).toBe(200)
    expect(update.body.changed).toBe(true)
    const wait = await server.post("/for_store/wait_service", { client_id_or_service_name: "remote", timeout: 10 })
    expect(wait.body.data.result).toBe(true)

    const after = await listed()
    expect(after.url).toBe(`${http.url}?v=2`)
    expect(after.client_id).toMatch(/^client_store_remote_[0-9a-f]{8}$/)
    expect(after.client_id).not.toBe(oldClientId)
    expect(update.body.service.client_id).toBe(after.client_id)
    // The old client_id names nothing any more; the new one names the service.
    expect((await server.get(`/for_store/service_status/${encodeURIComponent(oldClientId)}`)).status).toBe(404)
    const byNewId = await server.get(`/for_store/service_status/${encodeURIComponent(after.client_id as string)}`)
    expect(byNewId.status).toBe(200)
    expect(byNewId.body.name).toBe("remote")

    // A status change shows at once in the list form.
    const disconnect = await server.post("/for_store/disconnect_service", { service_name: "remote" })
    expect(disconnect.body.status).toBe("disconnected")
    expect((await listed()).status).toBe("disconnected")
    // The disabled mark is not part of the hash: the client_id stays.
    expect((await listed()).client_id).toBe(after.client_id)
  })
})
