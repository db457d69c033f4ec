// delete_service_two_step against a stdio server that has a grandchild: when the answer arrives the
// config entry is gone from the file and the whole process tree has ended (also a grandchild that
// ignores SIGTERM); an unknown service is 404 and changes nothing.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { eventually, firstText, fixtureService, processGone, startTestServer, type TestServer } from "../support/index.js"

describe("delete_service_two_step", { timeout: 10_000 }, () => {
  let server: TestServer

  beforeAll(async () => {
    server = await startTestServer()
    const reply = await server.post("/for_store/add_service?wait=10", [
      fixtureService("gc", "--spawn-grandchild"),
      fixtureService("stubborn", "--spawn-grandchild", "--grandchild-ignores-sigterm"),
      fixtureService("keep")
    ])
    expect(reply.body.services.map((s: { status: string }) => s.status)).toEqual(["healthy", "healthy", "healthy"])
  }, 25_000)
  afterAll(async () => {
    await server?.cleanup()
  }, 15_000)

  const pids = async (name: string) => {
    const child = Number(firstText((await server.post("/for_store/call_tool", { tool_name: `${name}__pid` })).body.content))
    const grandchild = Number(firstText((await server.post("/for_store/call_tool", { tool_name: `${name}__grandchild_pid` })).body.content))
    expect(child).toBeGreaterThan(0)
    expect(grandchild).toBeGreaterThan(0)
    expect(processGone(child)).toBe(false)
    expect(processGone(grandchild)).toBe(false)
    return { child, grandchild }
  }

  it.each([
    ["gc", "by name"],
    ["stubborn", "by client_id, grandchild ignores SIGTERM"]
  ])("%s (%s): both steps true, entry removed, child and grandchild gone", { timeout: 20_000 }, async (name) => {
    const { child, grandchild } = await pids(name)
    const clientId = server.running.store.forStore().listServices().find((s) => s.name === name)!.client_id
    const target = name === "gc" ? name : clientId

    const reply = await server.post("/for_store/delete_service_two_step", { service_name: target })
    // Checked the moment the answer arrives: nothing may be left running.
    const childGone = processGone(child)
    const grandchildGone = processGone(grandchild)
    const file = server.readFile() as { mcpServers: Record<string, unknown> }

    expect(reply.status).toBe(200)
    expect(reply.body).toMatchObject({
      success: true,
      service_name: name,
      step1_config_removal: true,
      step2_registry_cleanup: true,
      step1_error: null,
      step2_error: null,
      overall_success: true
    })
    const goneSoonAfter = await eventually(() => processGone(child) && processGone(grandchild), 2_000)
    const note = goneSoonAfter ? "still running when the answer arrived (gone shortly after)" : "still running 2 s after the answer"
    expect(childGone, `child ${note}`).toBe(true)
    // ESRCH, or a zombie: this machine's init does not reap orphans, so an ended grandchild may stay `Z`.
    expect(grandchildGone, `grandchild ${note}`).toBe(true)
    expect(file.mcpServers).not.toHaveProperty(name)
    expect(file.mcpServers).toHaveProperty("keep")
    expect(server.running.store.forStore().findService(name)).toBeUndefined()
    const list = await server.get("/for_store/list_services")
    expect(list.body.services.map((s: { name: string }) => s.name)).not.toContain(name)
    const call = await server.post("/for_store/call_tool", { tool_name: `${name}__echo`, args: { text: "x" } })
    expect(call.status).toBe(404)
  })

  it("the other service is untouched", async () => {
    const reply = await server.post("/for_store/call_tool", { tool_name: "keep__echo", args: { text: "still here" } })
    expect(reply.body).toMatchObject({ success: true, result: "still here" })
  })

  it("an unknown service is 404 SERVICE_NOT_FOUND and the file is unchanged", async () => {
    const before = server.readFileText()
    for (const name of ["ghost", "client_store_keep_00000000"]) {
      const reply = await server.post("/for_store/delete_service_two_step", { service_name: name })
      expect(reply.status).toBe(404)
      expect(reply.body).toMatchObject({ success: false, error: { code: "SERVICE_NOT_FOUND" } })
    }
    expect(server.readFileText()).toBe(before)
  })
})
