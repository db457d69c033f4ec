// Actor inspection: /inspect/machines (the machine definitions in XState's toJSON form, with every
// status of the service machine), /inspect/actors (the live actor tree with system ids, parents and
// each service's status) and /inspect/events (XState inspection events as SSE, e.g. a RESTART).
import { describe, expect, it } from "vitest"
import { addService, openSse, waitStatus, useTestServers } from "../support/index.js"

const stores = useTestServers({ httpFixture: true })

interface StateNode {
  readonly key: string
  readonly type: string
  readonly states: Readonly<Record<string, StateNode>>
}

describe("/inspect", () => {
  it("/inspect/machines gives the service, agent and store definitions with every service status", async () => {
    const server = await stores.start()
    const reply = await server.get("/inspect/machines")
    expect(reply.status).toBe(200)
    expect(reply.headers.get("content-type")).toMatch(/application\/json/)
    const { machines } = reply.body
    expect(reply.body.success).toBe(true)
    expect(Object.keys(machines).sort()).toEqual(["agent", "service", "store"])
    for (const name of ["service", "agent", "store"]) {
      expect(machines[name]).toMatchObject({ id: name, key: name, states: expect.any(Object) })
    }
    const service = machines.service as StateNode & { initial?: unknown }
    for (const state of ["start", "initializing", "connected", "reconnecting", "unreachable", "disconnecting", "disconnected"]) {
      expect(service.states, state).toHaveProperty(state)
    }
    const connected = service.states["connected"]!
    expect(connected.type).toBe("parallel")
    expect(Object.keys(connected.states["health"]!.states).sort()).toEqual(["healthy", "warning"])
    // Transitions are part of the definition (what a visualizer draws).
    expect(JSON.stringify(service)).toContain("RESTART")
  })

  it("/inspect/actors lists the actor tree with system ids, parents and each service's status", async () => {
    const srv = await stores.start()
    await addService(srv, "/for_store", { name: "alpha", url: stores.fixture.url })
    await addService(srv, "/for_agent/a1", { name: "beta", url: stores.fixture.url })
    await waitStatus(srv, "/for_store", "alpha", "healthy")
    await waitStatus(srv, "/for_agent/a1", "beta", "healthy")
    expect((await srv.post("/for_store/disconnect_service", { service_name: "alpha" })).status).toBe(200)
    await waitStatus(srv, "/for_store", "alpha", "disconnected")

    const reply = await srv.get("/inspect/actors")
    expect(reply.status).toBe(200)
    const actors = reply.body.actors as Array<{ system_id: string; parent: string | null; status: string; value: unknown; context: Record<string, unknown> }>
    expect(reply.body.total).toBe(actors.length)
    const byId = new Map(actors.map((a) => [a.system_id, a]))
    expect([...byId.keys()].sort()).toEqual(["agent:a1", "service:agent:a1:beta", "service:store:alpha", "store"])

    expect(byId.get("store")).toMatchObject({ parent: null, status: "active" })
    expect(actors[0]!.system_id).toBe("store")
    expect(byId.get("agent:a1")).toMatchObject({ parent: "store", status: "active" })
    expect(byId.get("service:store:alpha")).toMatchObject({
      parent: "store",
      status: "active",
      value: "disconnected",
      context: { name: "alpha", status: "disconnected", connected: false }
    })
    expect(byId.get("service:agent:a1:beta")).toMatchObject({
      parent: "agent:a1",
      context: { name: "beta", status: "healthy", connected: true }
    })
    expect((byId.get("service:agent:a1:beta")!.context["tool_count"] as number) > 0).toBe(true)
  })

  it("/inspect/events streams the RESTART event sent to a service actor and its snapshots", async () => {
    const srv = await stores.start()
    await addService(srv, "/for_store", { name: "alpha", url: stores.fixture.url })
    await waitStatus(srv, "/for_store", "alpha", "healthy")
    const s = await openSse(`${srv.url}/inspect/events`)
    stores.defer(() => s.close())
    expect(s.status).toBe(200)
    expect(s.headers.get("content-type")).toMatch(/^text\/event-stream/)

    const restart = await srv.post("/for_store/restart_service", { service_name: "alpha" })
    expect(restart.status).toBe(200)

    const sent = await s.waitFor(
      (e) => e.json?.type === "@xstate.event" && e.json?.actor === "service:store:alpha" && e.json?.event?.type === "RESTART",
      5000,
      "@xstate.event RESTART"
    )
    expect(sent.event).toBe("inspect")
    expect(sent.id).toMatch(/^\d+$/)
    await s.waitFor((e) => e.json?.type === "@xstate.snapshot" && e.json?.actor === "service:store:alpha", 5000, "@xstate.snapshot")
    // The actor goes through initializing and is healthy again; its snapshots say so.
    await waitStatus(srv, "/for_store", "alpha", "healthy")
    await s.until(
      (es) => es.some((e) => e.json?.type === "@xstate.snapshot" && e.json?.actor === "service:store:alpha" && JSON.stringify(e.json.value).includes("healthy")),
      5000,
      "a healthy snapshot after the restart"
    )
    const snapshots = s.events.filter((e) => e.json?.type === "@xstate.snapshot" && e.json?.actor === "service:store:alpha")
    expect(snapshots.some((e) => e.json.value === "initializing")).toBe(true)
    for (const e of s.events) expect(e.json, e.data).toEqual(expect.objectContaining({ type: expect.stringMatching(/^@xstate\./) }))
  })
})
