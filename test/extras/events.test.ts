// GET /events (Server-Sent Events): the stream opens with a ": connected" comment; adding a service
// gives `status` events (initializing -> healthy) and `tools_changed`, a tool call gives `tool_call`;
// ids increase; `?agent_id=` narrows to one scope; a bad agent_id is a 400; a client that goes away
// is released at once; and shutdown ends open streams (/events and /inspect/events) without
// waiting out the grace period.
import { Agent, get } from "node:http"
import { describe, expect, it } from "vitest"
import { addService, eventually, openSse, useTestServers, within } from "../support/index.js"

const stores = useTestServers({ httpFixture: true })
const start = stores.start
const open = async (path: string) => {
  const s = await openSse(stores.server.url + path)
  stores.defer(() => s.close())
  return s
}

describe("GET /events", () => {
  it("is an event stream that starts with the ': connected' comment", async () => {
    await start()
    const s = await open("/events")
    expect(s.status).toBe(200)
    expect(s.headers.get("content-type")).toMatch(/^text\/event-stream/)
    expect(s.headers.get("cache-control")).toBe("no-cache")
    await eventually(() => s.text().length > 0, 2000)
    expect(s.text().startsWith(": connected\n\n")).toBe(true)
    expect(s.comments[0]).toBe("connected")
  })

  it("carries status (initializing -> healthy), tools_changed and tool_call events, with increasing ids", async () => {
    const srv = await start()
    const s = await open("/events")
    await addService(srv, "/for_store", { name: "alpha", url: stores.fixture.url })

    const healthy = await s.waitFor((e) => e.event === "status" && e.json?.service_name === "alpha" && e.json?.to === "healthy", 5000, "status -> healthy")
    expect(healthy.json).toEqual({
      scope: "store",
      service_name: "alpha",
      from: "initializing",
      to: "healthy",
      at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/),
      reason: expect.any(String)
    })
    const statuses = s.events.filter((e) => e.event === "status" && e.json?.service_name === "alpha").map((e) => e.json)
    // The service's first transition enters initializing; healthy comes after it.
    const tos = statuses.map((t) => t.to)
    expect(tos).toContain("initializing")
    expect(tos.indexOf("initializing")).toBeLessThan(tos.indexOf("healthy"))

    const tools = await s.waitFor((e) => e.event === "tools_changed" && e.json?.service_name === "alpha", 5000, "tools_changed")
    expect(tools.json).toMatchObject({ scope: "store", service_name: "alpha", tool_count: expect.any(Number) })
    expect(tools.json.tool_count).toBeGreaterThan(0)

    const call = await srv.post("/for_store/call_tool", { tool_name: "alpha__echo", args: { text: "hi" } })
    expect(call.status).toBe(200)
    const tc = await s.waitFor((e) => e.event === "tool_call", 5000, "tool_call")
    expect(tc.json).toMatchObject({
      scope: "store",
      agent_id: null,
      service_name: "alpha",
      tool_name: "echo",
      outcome: "success",
      duration_ms: expect.any(Number),
      trace_id: call.body.trace_id
    })

    const ids = s.events.map((e) => Number(e.id))
    expect(ids.every((n) => Number.isInteger(n) && n > 0)).toBe(true)
    for (let i = 1; i < ids.length; i++) expect(ids[i]).toBeGreaterThan(ids[i - 1]!)
  })

  it("?agent_id=a1 carries only agent a1's events, ?agent_id=store only the store's", async () => {
    const srv = await start()
    const a1 = await open("/events?agent_id=a1")
    const storeOnly = await open("/events?agent_id=store")
    const all = await open("/events")

    await addService(srv, "/for_store", { name: "alpha", url: stores.fixture.url })
    await addService(srv, "/for_agent/a1", { name: "beta", url: stores.fixture.url })
    await addService(srv, "/for_agent/a2", { name: "gamma", url: stores.fixture.url })
    expect((await srv.post("/for_store/call_tool", { tool_name: "alpha__echo", args: { text: "s" } })).status).toBe(200)
    expect((await srv.post("/for_agent/a1/call_tool", { tool_name: "beta__echo", args: { text: "a" } })).status).toBe(200)
    expect((await srv.post("/for_agent/a2/call_tool", { tool_name: "gamma__echo", args: { text: "b" } })).status).toBe(200)

    // The unfiltered stream sees all three calls; by then the filtered streams have had every event too.
    await all.until((es) => es.filter((e) => e.event === "tool_call").length === 3, 5000, "three tool_call events")
    await a1.waitFor((e) => e.event === "tool_call", 5000, "a1 tool_call")
    await storeOnly.waitFor((e) => e.event === "tool_call", 5000, "store tool_call")

    expect(a1.events.length).toBeGreaterThan(0)
    for (const e of a1.events) expect(e.json?.scope, `${e.event} ${e.data}`).toBe("a1")
    expect(a1.events.some((e) => e.event === "status" && e.json.service_name === "beta" && e.json.to === "healthy")).toBe(true)
    expect(a1.events.some((e) => e.event === "tools_changed" && e.json.service_name === "beta")).toBe(true)
    expect(a1.events.find((e) => e.event === "tool_call")?.json).toMatchObject({ agent_id: "a1", service_name: "beta", tool_name: "echo" })

    for (const e of storeOnly.events) expect(e.json?.scope, `${e.event} ${e.data}`).toBe("store")
    expect(storeOnly.events.some((e) => e.event === "status" && e.json.service_name === "alpha" && e.json.to === "healthy")).toBe(true)
    expect(storeOnly.events.filter((e) => e.event === "tool_call").map((e) => e.json.service_name)).toEqual(["alpha"])

    expect(new Set(all.events.map((e) => e.json?.scope))).toEqual(new Set(["store", "a1", "a2"]))
  })

  it("refuses a bad agent_id with 400 and the contract body", async () => {
    const srv = await start()
    for (const bad of ["bad.id", "a b", "x".repeat(101)]) {
      const reply = await srv.get(`/events?agent_id=${encodeURIComponent(bad)}`)
      expect(reply.status, bad).toBe(400)
      expect(reply.body).toMatchObject({
        success: false,
        message: expect.any(String),
        error: { code: "VALIDATION_ERROR", message: reply.body.message, details: { fields: [expect.objectContaining({ field: "agent_id" })] } }
      })
    }
  })

  it("releases a client that goes away at once", async () => {
    const srv = await start()
    const subscribers = async () => (await srv.get("/monitoring/active_connections")).body.event_subscribers as number
    expect(await subscribers()).toBe(0)
    const s = await open("/events")
    expect(await eventually(async () => (await subscribers()) === 1, 2000)).toBe(true)
    s.close()
    expect(await eventually(async () => (await subscribers()) === 0, 5000)).toBe(true)
  })

  it("close() completes while /events and /inspect/events streams are open, and the streams end", async () => {
    // A 60 s grace period: a close that waited for the streams instead of ending them would hang.
    const srv = await start({ graceMs: 60_000 })
    const events = await open("/events")
    const inspect = await open("/inspect/events")
    expect(events.status).toBe(200)
    expect(inspect.status).toBe(200)
    await eventually(() => events.comments.includes("connected") && inspect.comments.includes("connected"), 2000)
    await within(srv.close(), 10_000, "server close with open event streams")
    const ends = await within(Promise.all([events.ended, inspect.ended]), 2000, "client side of the streams ending")
    expect(ends.every((e) => e === "end" || e === "error")).toBe(true)
  })

  it("close() does not wait out the grace period for the keep-alive connection of an ended stream", async () => {
    // README: "shutdown ends open streams instead of waiting for them". A client whose agent keeps
    // idle sockets open (node:http keep-alive): once shutdown has ended the stream, its socket is
    // idle and should be closed then, not at the end of the grace period. (Fails at the time of
    // writing: server.ts calls closeIdleConnections() only once, before the streams end; see the
    // report of test/extras for the fix.)
    // A 60 s grace period: a close that waited it out for the idle socket would hang.
    const srv = await start({ graceMs: 60_000 })
    const agent = new Agent({ keepAlive: true, keepAliveMsecs: 60_000 })
    try {
      let ended = false
      await within(
        new Promise<void>((resolve, reject) => {
          get(`${srv.url}/events`, { agent }, (res) => {
            res.once("data", () => resolve())
            res.on("end", () => (ended = true))
            res.on("error", () => (ended = true))
          }).on("error", reject)
        }),
        5000,
        "the /events stream opens"
      )
      await within(srv.close(), 10_000, "server close (60 s grace period)")
      expect(ended).toBe(true)
    } finally {
      agent.destroy()
    }
  })
})
