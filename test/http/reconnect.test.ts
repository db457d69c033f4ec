// Upstreams that die and come back: the store notices by itself (process exit, failed health
// checks), goes `reconnecting`, and is `healthy` again with no client request driving it. Observed
// through wait_service with status arrays and the service actor's recorded transitions.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { eventually, firstText, fixtureService, processGone, startTestServer, type TestServer } from "../support/index.js"

describe("reconnection after the upstream dies", { timeout: 10_000 }, () => {
  let http: HttpFixture
  let server: TestServer

  beforeAll(async () => {
    http = await startHttpFixture()
    server = await startTestServer()
    const reply = await server.post("/for_store/add_service?wait=10", [fixtureService("proc"), { name: "remote", url: http.url }])
    expect(reply.body.services.map((s: { status: string }) => s.status)).toEqual(["healthy", "healthy"])
  }, 25_000)
  afterAll(async () => {
    await server?.cleanup()
    await http?.stop()
  }, 15_000)

  const wait = (name: string, status: string | string[], timeout: number) =>
    server.post("/for_store/wait_service", { client_id_or_service_name: name, status, timeout })

  it("SIGKILL of the stdio server: reconnecting, then healthy with a new process", { timeout: 20_000 }, async () => {
    const pid = Number(firstText((await server.post("/for_store/call_tool", { tool_name: "proc__pid" })).body.content))
    expect(pid).toBeGreaterThan(0)
    const actor = server.running.store.forStore().findService("proc")!
    const seen: string[] = []
    const sub = actor.subscribe((s) => {
      const status = s.context.status ?? ""
      if (seen.at(-1) !== status) seen.push(status)
    })
    try {
      process.kill(pid, "SIGKILL")
      const left = await wait("proc", ["reconnecting", "unreachable"], 5)
      expect(left.body.data).toMatchObject({ result: true, final_status: "reconnecting", target_status: ["reconnecting", "unreachable"] })

      const back = await wait("proc", ["healthy"], 10)
      expect(back.status).toBe(200)
      expect(back.body.data).toMatchObject({ result: true, final_status: "healthy" })
      expect(seen).toEqual(expect.arrayContaining(["reconnecting", "healthy"]))
      expect(seen.indexOf("reconnecting")).toBeLessThan(seen.lastIndexOf("healthy"))

      const transitions = actor.getSnapshot().context.transitions
      // Usually the closed transport is seen first (healthy -> reconnecting); on a loaded machine a
      // health check may fail first (healthy -> warning -> reconnecting). Either way it left healthy.
      const down = transitions.findLast((t) => t.to === "reconnecting")
      expect(down?.reason).toMatch(/transport closed|exit|health check failed/i)
      expect(transitions.some((t) => t.from === "healthy" && (t.to === "reconnecting" || t.to === "warning"))).toBe(true)
      expect(transitions.at(-1)).toMatchObject({ from: "reconnecting", to: "healthy", reason: "reconnected" })

      const newPid = Number(firstText((await server.post("/for_store/call_tool", { tool_name: "proc__pid" })).body.content))
      expect(newPid).toBeGreaterThan(0)
      expect(newPid).not.toBe(pid)
      expect(await eventually(() => processGone(pid), 2_000)).toBe(true)
      const listed = (await server.get("/for_store/list_services")).body.services.find((s: { name: string }) => s.name === "proc")
      expect(listed).toMatchObject({ status: "healthy", reconnect_attempts: 0, next_retry_at: null })
    } finally {
      sub.unsubscribe()
    }
  })

  it("HTTP server stopped, then restarted on the same port: leaves healthy, then healthy again", { timeout: 25_000 }, async () => {
    const actor = server.running.store.forStore().findService("remote")!
    const before = actor.getSnapshot().context.transitions.length
    await http.stop()
    // Health checks every 0.5 s: the first failure gives `warning`, the second `reconnecting`.
    const left = await wait("remote", ["warning", "reconnecting", "unreachable"], 5)
    expect(left.body.data.result).toBe(true)
    const reconnecting = await wait("remote", ["reconnecting"], 5)
    expect(reconnecting.body.data).toMatchObject({ result: true, final_status: "reconnecting" })
    const call = await server.post("/for_store/call_tool", { tool_name: "remote__echo", args: { text: "x" } })
    expect(call.status).toBe(503)
    expect(call.body.error).toMatchObject({ code: "SERVICE_UNAVAILABLE", details: { status: "reconnecting" } })
    expect(call.body.error.details.next_retry_at === null || typeof call.body.error.details.next_retry_at === "string").toBe(true)

    await http.restart()
    const back = await wait("remote", "healthy", 10)
    expect(back.body.data).toMatchObject({ result: true, final_status: "healthy" })
    const news = actor.getSnapshot().context.transitions.slice(before).map((t) => t.to)
    expect(news).toContain("reconnecting")
    expect(news.at(-1)).toBe("healthy")
    const echo = await server.post("/for_store/call_tool", { tool_name: "remote__echo", args: { text: "back" } })
    expect(echo.body).toMatchObject({ success: true, result: "back" })
    expect(http.sessions()).toBeGreaterThanOrEqual(1)
  })
})

describe("tool lists after a reconnection (update_tools_on_reconnection)", { timeout: 10_000 }, () => {
  let server: TestServer | undefined
  let first: HttpFixture | undefined
  let second: HttpFixture | undefined
  afterEach(async () => {
    await server?.cleanup()
    await first?.stop()
    await second?.stop()
    server = first = second = undefined
  }, 15_000)

  /** Registers a service on fixture A, replaces A by B (tools prefixed `v2_`) on the same port, waits for the reconnection. */
  const reconnectToNewTools = async (updateTools: boolean) => {
    first = await startHttpFixture()
    // The new server's tools (other names) are taken at once: held by default (test/extras/tool-pins.test.ts).
    server = await startTestServer({ monitoring: { update_tools_on_reconnection: updateTools }, options: { pin_new_tools: "accept" } })
    const added = await server.post("/for_store/add_service?wait=10", { name: "svc", url: first.url })
    expect(added.body.services[0]).toMatchObject({ status: "healthy", tool_count: 6 })
    const actor = server.running.store.forStore().findService("svc")!
    const before = actor.getSnapshot().context.transitions.length
    await first.stop()
    second = await startHttpFixture({ port: first.port, server: { prefix: "v2_" } })
    const reconnected = await eventually(() => {
      const s = actor.getSnapshot().context
      return s.status === "healthy" && s.transitions.slice(before).some((t) => t.reason === "reconnected")
    }, 10_000)
    expect(reconnected).toBe(true)
    return server.running.store.forStore().listTools().map((t) => t.original_name).sort()
  }

  it("true (default): the tools are listed again", { timeout: 20_000 }, async () => {
    const names = await reconnectToNewTools(true)
    expect(names).toEqual(["v2_add", "v2_add_tool", "v2_echo", "v2_fail", "v2_pid", "v2_sleep"])
    const call = await server!.post("/for_store/call_tool", { tool_name: "svc__v2_echo", args: { text: "new" } })
    expect(call.body).toMatchObject({ success: true, result: "new" })
  })

  it("false: the tool list is not listed again on reconnection", { timeout: 20_000 }, async () => {
    const names = await reconnectToNewTools(false)
    expect(names).toEqual(["add", "add_tool", "echo", "fail", "pid", "sleep"])
  })
})
